import FleetQueue
import Logging
import Metrics

/// Fails renders still open past their deadline (their worker died, or none started them)
/// with `RENDER_TIMEOUT`, releasing their credits. A worker that comes back later finds the
/// render ended and leaves it so.
public struct RenderTimeoutSweeper: Sendable {
    /// Open renders past their deadline fail with `RENDER_TIMEOUT`, credit released.
    public static let task = MaintenanceTask(rawValue: "renders.timeout")
    let store: RenderStore
    let logger: Logger

    public init(store: RenderStore, logger: Logger) {
        self.store = store
        self.logger = logger
    }

    /// Returns the ids of the renders it ended.
    @discardableResult
    public func runOnce(limit: Int = 1000) async throws -> [String] {
        let ended = try await store.failExpired(limit: limit)
        for render in ended {
            Counter(label: "fleet_renders_finished_total", dimensions: [("provider", render.provider), ("outcome", RenderErrorCode.renderTimeout.rawValue)]).increment()
            if render.charged { RenderMetrics.creditSettled("release") }
        }
        if !ended.isEmpty {
            logger.warning("renders timed out", metadata: ["count": "\(ended.count)", "render_ids": "\(ended.prefix(20).map(\.id))"])
        }
        return ended.map(\.id)
    }
}
