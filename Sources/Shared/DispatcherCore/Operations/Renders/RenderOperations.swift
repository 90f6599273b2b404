import FleetCallbacks
import DispatcherProtocol
import FleetPostgres
import FleetQueue
import Logging
import Renders

extension OperationRegistry {
    /// Every render and onboarding op: `render.request`, `render.status`, `render.wait`,
    /// `render.feedback`, `renders.list`, `token.issue`, `account.link`, `credits.get`, and the
    /// operators' `render.retry` (audited, and logged to `logger`).
    public static func renderOperations(
        pool: PostgresPool, admission: RenderAdmission, watcher: FinishWatcher, settings: RenderRequestSettings, outbound: OutboundPolicy = .closed,
        logger: Logger? = nil
    ) -> [any DispatcherOperation] {
        let store = RenderStore(pool: pool)
        let tokens = EphemeralTokens(pool: pool, ttl: settings.tokenTTL)
        return [
            RequestRenderOperation(requests: RenderRequests(pool: pool, admission: admission, deadline: settings.deadline), store: store, outbound: outbound),
            RenderStatusOperation(store: store),
            WaitRenderOperation(store: store, watcher: watcher),
            RenderFeedbackOperation(store: store),
            ListRendersOperation(store: store),
            IssueTokenOperation(tokens: tokens),
            LinkAccountOperation(tokens: tokens, freeCredits: settings.freeCredits),
            CreditsGetOperation(balances: CreditBalances(pool: pool)),
            RetryRendersOperation(
                retries: RenderRetries(pool: pool, deadline: settings.deadline), store: store,
                control: JobControl(driver: PostgresQueueDriver(executor: pool), logger: logger)),
        ]
    }
}

extension RenderStore {
    /// The render as the protocol shows it, or `NOT_FOUND`.
    func view(of id: String) async throws -> RenderView {
        guard let render = try await render(id: id) else { throw DispatcherError(.notFound, "no render \(id)") }
        return RenderView(render)
    }
}
