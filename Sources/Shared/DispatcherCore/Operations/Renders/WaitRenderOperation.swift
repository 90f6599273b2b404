import DispatcherProtocol
import Renders

/// `render.wait`: answers once the render is complete or failed, woken by the
/// `fleet_renders_finished` notification its ending statement sends (no polling), or when the
/// timeout passes or the server shuts down.
public struct WaitRenderOperation: DispatcherOperation {
    public var access: OperationAccess { .everyRole }
    let store: RenderStore
    let watcher: FinishWatcher
    let urls: any ImageURLs

    public func run(_ request: WaitRenderRequest) async throws -> WaitRenderRequest.Result {
        let signing = resultURLs(urls)
        let (render, timedOut) = try await watcher.wait(
            for: .render(request.renderId), timeoutMs: request.timeoutMs,
            read: { [store] in try await store.view(of: request.renderId, resultURLs: signing) },
            isDone: \.isTerminal)
        return WaitRenderRequest.Result(render: render, timedOut: timedOut)
    }
}
