/// The name of a kind of job; it picks the handler that runs it. The catalogue lists every
/// kind this fleet knows, so a mistyped or foreign kind is refused at enqueue and swept to
/// `dead` if it reaches the table some other way.
public struct JobKind: RawRepresentable, Hashable, Sendable, Comparable, CustomStringConvertible, ExpressibleByStringLiteral {
    public let rawValue: String

    public init(rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { self.rawValue = value }
    public var description: String { rawValue }
    public static func < (lhs: JobKind, rhs: JobKind) -> Bool { lhs.rawValue < rhs.rawValue }

    /// Every kind of the fleet, with what it does.
    public static let catalogue: [JobKind: String] = [
        .imageNormalize: "image worker: normalise an upload to at most 1200 px wide, JPEG quality 80",
        .garmentCutout: "image worker: remove a garment photo's background (cut-out PNG, preview, foreground fraction)",
        .renderRun: "render worker: run one render at its provider, store the result, settle its credit",
        .accountPurge: "image worker: delete every file of one user (account deletion)",
        .drillNoop: "synthetic: does nothing (queue benchmarks and load drills)",
        .drillScript: "synthetic: sleeps, fails or crashes as its payload says (queue tests and drills)",
    ]

    public var isKnown: Bool { JobKind.catalogue[self] != nil }

    public static let imageNormalize: JobKind = "image.normalize"
    public static let garmentCutout: JobKind = "garment.cutout"
    public static let accountPurge: JobKind = "account.purge"
    public static let renderRun: JobKind = "render.run"
    public static let drillNoop: JobKind = "drill.noop"
    public static let drillScript: JobKind = "drill.script"
}
