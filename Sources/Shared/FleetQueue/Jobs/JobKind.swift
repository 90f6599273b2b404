/// The name of a kind of job; it picks the handler that runs it. The queue knows no kind: each
/// module declares the kinds it handles with their payload types (`JobPayload`), and each
/// process is given the kinds it knows (`KnownKinds`).
public struct JobKind: RawRepresentable, Codable, Hashable, Sendable, Comparable, CustomStringConvertible, ExpressibleByStringLiteral {
    public let rawValue: String

    public init(rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { self.rawValue = value }
    public var description: String { rawValue }
    public static func < (lhs: JobKind, rhs: JobKind) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// A kind of job's payload. The type names its kind, so a job is enqueued as the kind its
/// payload belongs to and read back as the type it was enqueued with (swift-jobs'
/// `JobParameters`).
public protocol JobPayload: Codable, Sendable {
    static var kind: JobKind { get }
    /// What a job of this kind does, in one line.
    static var summary: String { get }
}

/// The kinds a process knows, with what each does: `enqueue` refuses others, the sweeper ends
/// others `dead`, the gauges report each.
public struct KnownKinds: Sendable {
    public let summaries: [JobKind: String]

    public init(_ payloads: [any JobPayload.Type]) {
        summaries = Dictionary(payloads.map { ($0.kind, $0.summary) }, uniquingKeysWith: { first, _ in first })
    }

    public var kinds: Set<JobKind> { Set(summaries.keys) }

    public func contains(_ kind: JobKind) -> Bool { summaries[kind] != nil }

    /// The names, sorted, for error messages.
    public var list: String { summaries.keys.sorted().map(\.rawValue).joined(separator: ", ") }

    /// A line per kind, sorted: its name and what it does (`dispatcher enqueue --help`).
    public var described: String {
        summaries.sorted { $0.key < $1.key }.map { "\($0.key.rawValue): \($0.value)" }.joined(separator: "\n")
    }
}
