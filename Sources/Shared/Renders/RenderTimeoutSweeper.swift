import FleetQueue
import Logging
import Metrics

/// Fails renders still open past their deadline (their worker died, or none started them)
/// with `RENDER_TIMEOUT`, releasing their credits, then asks the provider to drop the job a
/// dead worker left running there (billed otherwise), as the worker does on its own timeout.
/// A worker that comes back later finds the render ended and leaves it so.
public struct RenderTimeoutSweeper: Sendable {
    /// Open renders past their deadline fail with `RENDER_TIMEOUT`, credit released.
    public static let task = MaintenanceTask(rawValue: "renders.timeout")
    let store: RenderStore
    let providers: ProviderCatalog
    let logger: Logger

    public init(store: RenderStore, providers: ProviderCatalog, logger: Logger) {
        self.store = store
        self.providers = providers
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
        // Not awaited: a provider slow to answer (up to the cancel's own timeout) must not hold
        // up the next sweep of this schedule entry.
        if ended.contains(where: { $0.submission != nil }) { Task { await cancelAtProviders(ended) } }
        return ended.map(\.id)
    }

    /// After the sweep's commit, best effort: a provider that cannot be reached or made (no key
    /// in this process) leaves the job to run out there, logged.
    private func cancelAtProviders(_ ended: [RenderStore.Ended]) async {
        await withTaskGroup(of: Void.self) { group in
            for render in ended {
                guard let submission = render.submission, !submission.state.isSettled else { continue }
                group.addTask {
                    do {
                        try await providers.provider(named: render.provider).cancel(submission)
                        logger.info("provider job of a timed-out render cancelled",
                                    metadata: ["render_id": "\(render.id)", "provider_job_id": "\(submission.jobID)"])
                    } catch {
                        logger.warning("provider job of a timed-out render not cancelled",
                                       metadata: ["render_id": "\(render.id)", "error": "\(error)"])
                    }
                }
            }
        }
    }
}
