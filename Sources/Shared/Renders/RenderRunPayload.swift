import FleetQueue
import FleetStorage

extension JobKind {
    public static let renderRun = RenderRunPayload.kind
}

/// `render.run`'s payload: written with the render by `RenderRequests`, read by the render worker.
public struct RenderRunPayload: JobPayload, Equatable {
    public static let kind: JobKind = "render.run"
    public static let summary = "render worker: run one render at its provider, store the result, settle its credit"
    public let renderId: StorageID

    public init(renderId: StorageID) { self.renderId = renderId }
}
