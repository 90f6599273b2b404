import FleetAccess
import DispatcherProtocol
import FleetCallbacks
import FleetPostgres
import FleetQueue
import FleetStorage
import Imaging
import Logging
import Renders
import ServiceLifecycle

/// The dispatcher's socket side as `dispatcher run` assembles it: the job and render operations,
/// the watcher that wakes `wait` and `render.wait`, and the server, bound and ready to run.
public struct DispatcherStack: Sendable {
    public let server: DispatcherServer
    public let watcher: FinishWatcher

    /// `notifier`: the process's LISTEN connection, which the caller runs (before these services,
    /// so it stops after them). `liveWorkerWithin`: how recent a worker's heartbeat must be for
    /// `stats` to count it live. `renderRecheck`: how often `render.wait`s look again in case a
    /// notification was lost. `outbound`: what `callbackUrl`s and `http.request` jobs must pass.
    /// `tokens`: the access tokens, when the caller shares them (the console's logins); made from
    /// `settings` otherwise. `readPool`: a streaming replica for `stats`, `jobs.list` and
    /// `audit.list` (`FLEET_READ_DATABASE_URL`); every other op reads and writes on `pool`.
    /// `storage`: where the images are (`FleetSettings.storage`), for `upload.presign`,
    /// `image.url` and the renders' `resultUrl`; the dispatcher signs URLs, it never reads images.
    public static func bind(
        pool: PostgresPool, readPool: PostgresPool? = nil, notifier: Notifier, settings: DispatcherSettings, renderSettings: RenderRequestSettings,
        liveWorkerWithin: Duration, renderRecheck: Duration = FinishWatcher.defaultRecheckInterval, outbound: OutboundSettings = .off,
        tokens: AccessTokens? = nil, storage: StorageLocation = .files(root: ".data/images"),
        logger: Logger
    ) async throws -> DispatcherStack {
        let queue = JobQueue(executor: pool, knownKinds: FleetKinds.all)
        let reads = readPool.map { JobQueue(executor: $0, knownKinds: FleetKinds.all) }
        let batcher = settings.groupCommit == .on ? EnqueueBatcher(queue: queue) : nil
        let watcher = FinishWatcher(notifier: notifier, recheckInterval: renderRecheck, logger: logger)
        let admission = RenderAdmission(pool: pool, notifier: notifier, logger: logger)
        let operations = OperationRegistry(
            OperationRegistry.jobOperations(
                queue: queue, reads: reads, enqueuer: batcher ?? queue, watcher: watcher, liveWorkerWithin: liveWorkerWithin, profiles: StoredNormalizeProfiles(pool: pool),
                outbound: outbound, logger: logger)
                + OperationRegistry.jobControlOperations(queue: queue, reads: reads, admissionChanged: { admission.controlsChanged() }, logger: logger)
                + OperationRegistry.renderOperations(
                    pool: pool, admission: admission, watcher: watcher, settings: renderSettings, outbound: outbound.policy,
                    urls: imageURLs(for: storage), maxUploadBytes: ImageLimits().maxBytes, logger: logger))
        let tokens = tokens ?? AccessTokens(environmentToken: settings.token, store: AccessTokenStore(pool: pool), logger: logger)
        try await tokens.load()
        let server = try await DispatcherServer.bind(settings: settings, operations: operations, tokens: tokens, logger: logger)
        return DispatcherStack(server: server, watcher: watcher, tokens: tokens, admission: admission, batcher: batcher)
    }

    public let tokens: AccessTokens
    /// The estimate `render.request` admits renders on.
    let admission: RenderAdmission
    /// The group commit of single enqueues; nil when it is off.
    let batcher: EnqueueBatcher?

    /// In start order; a service group shuts them down in reverse, the server first (the batcher
    /// and render admission after it, once every request in flight is answered).
    public var services: [any Service] { [tokens, watcher, admission] + (batcher.map { [$0] } ?? []) + [server] }
}
