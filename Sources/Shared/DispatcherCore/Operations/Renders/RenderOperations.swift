import FleetAccess
import FleetCallbacks
import DispatcherProtocol
import FleetStorage
import Foundation
import FleetPostgres
import FleetQueue
import Logging
import Renders

extension OperationRegistry {
    /// Every render and onboarding op: `render.request`, `render.status`, `render.wait`,
    /// `render.feedback`, `renders.list`, `token.issue`, `account.link`, `credits.get`, and the
    /// operators' `render.retry` (audited, and logged to `logger`), and the image store's
    /// presigned URLs: `upload.presign`, `image.url` and the renders' `resultUrl` (`urls`).
    public static func renderOperations(
        pool: PostgresPool, admission: RenderAdmission, watcher: FinishWatcher, settings: RenderRequestSettings, outbound: OutboundPolicy = .closed,
        urls: any ImageURLs, maxUploadBytes: Int, logger: Logger? = nil
    ) -> [any DispatcherOperation] {
        let store = RenderStore(pool: pool)
        let tokens = EphemeralTokens(pool: pool, ttl: settings.tokenTTL)
        return [
            RequestRenderOperation(requests: RenderRequests(pool: pool, admission: admission, deadline: settings.deadline), store: store, outbound: outbound),
            RenderStatusOperation(store: store, urls: urls),
            WaitRenderOperation(store: store, watcher: watcher, urls: urls),
            RenderFeedbackOperation(store: store),
            ListRendersOperation(store: store),
            IssueTokenOperation(tokens: tokens),
            LinkAccountOperation(tokens: tokens, freeCredits: settings.freeCredits),
            CreditsGetOperation(balances: CreditBalances(pool: pool)),
            RetryRendersOperation(
                retries: RenderRetries(pool: pool, deadline: settings.deadline), store: store,
                control: JobControl(executor: pool, logger: logger)),
            PresignUploadOperation(urls: urls, tokens: tokens, maxBytes: maxUploadBytes, logger: logger),
            ImageURLOperation(urls: urls, store: store, logger: logger),
        ]
    }
}

extension RenderStore {
    /// The render as the protocol shows it, or `NOT_FOUND`; once complete, with a presigned GET
    /// of its result from `resultURLs` (none when nil, or when the store is files).
    func view(of id: String, resultURLs: (any ImageURLs)?) async throws -> RenderView {
        guard let render = try await render(id: try storageID(id, field: "renderId")) else { throw DispatcherError(.notFound, "no render \(id)") }
        guard let resultURLs, render.status == .complete else { return RenderView(render) }
        do {
            let key = StorageKey.render(user: render.ownerID, render: render.id)
            return RenderView(render, resultUrl: try resultURLs.get(key, seconds: PresignedURLLifetime.defaultSeconds, at: Date()).url)
        } catch is ImageURLsUnavailable {
            return RenderView(render)
        }
    }
}

/// The URLs `render.status` and `render.wait` sign results with for the current caller: only
/// one whose role may use `image.url` (a backend, an operator); a `read` token (a dashboard)
/// sees renders, never a way to the person's photo (`image.url` is `submitters` too). Read in the op's own task, where `Caller.current` is set.
func resultURLs(_ urls: any ImageURLs, for caller: Caller? = Caller.current) -> (any ImageURLs)? {
    guard let caller, case .roles(let roles) = OperationAccess.submitters, roles.contains(caller.role) else { return nil }
    return urls
}
