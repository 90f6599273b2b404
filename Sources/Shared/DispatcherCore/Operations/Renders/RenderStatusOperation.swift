import DispatcherProtocol
import Renders

/// `render.status`: one render by id (the app polls it about every 2 s).
public struct RenderStatusOperation: DispatcherOperation {
    public var access: OperationAccess { .everyRole }
    let store: RenderStore
    let urls: any ImageURLs

    public func run(_ request: RenderStatusRequest) async throws -> RenderView {
        try await store.view(of: request.renderId, resultURLs: resultURLs(urls))
    }
}
