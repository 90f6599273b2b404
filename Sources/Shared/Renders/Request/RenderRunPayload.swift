import FleetQueue
import FleetStorage

extension JobKind {
    public static let renderRun = RenderRunPayload.kind
}

/// `render.run`'s payload: written with the render by `RenderRequests`, read by the render worker.
public struct RenderRunPayload: JobPayload, Equatable {
    public static let kind: JobKind = "render.run"
    public static let summary = "render worker: run one render at its provider, store the result, settle its credit"
    public let renderID: StorageID
    /// The `garment.cutout` job the render runs after, when the request carried the garment's
    /// upload (`RenderInputs`): its result says whether there is a cut-out to use. nil: the
    /// render uses the garment's cut-out if one is stored, else its photo.
    public let cutoutJobID: Int64?

    public init(renderID: StorageID, cutoutJobID: Int64? = nil) {
        self.renderID = renderID
        self.cutoutJobID = cutoutJobID
    }

    /// The payload's JSON names (`docs/protocol.md`).
    enum CodingKeys: String, CodingKey {
        case renderID = "renderId", cutoutJobID = "cutoutJobId"
    }
}
