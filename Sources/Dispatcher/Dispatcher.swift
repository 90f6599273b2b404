import FleetAccess
import ArgumentParser
import DispatcherCore
import DispatcherProtocol
import FleetHTTPClient
import FleetPostgres
import FleetQueue
import FleetRuntime
import FleetSchema
import FleetStorage
import Foundation
import Logging
import FleetCommands
import FleetHTTP
import FleetCallbacks
import Providers
import ServiceLifecycle
import Renders

@main
struct Dispatcher: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dispatcher",
        abstract: "The fleet's front door and clock: the socket protocol for backend services, the maintenance schedule.",
        discussion: settingsNote,
        subcommands: [
            Run.self, MigrateCommand.self, Ping.self, Enqueue.self, EnqueueGraph.self, Status.self, Wait.self, Cancel.self, Stats.self,
            Render.self, RendersCommand.self, IssueToken.self, LinkAccount.self, Credits.self, UploadCommand.self, ImageCommand.self,
            JobCommand.self, Jobs.self, Retry.self, Discard.self, Pause.self, Resume.self, Limits.self, Audit.self, AccessTokenCommand.self,
            ImageProfilesCommand.self, StorageCommand.self,
        ],
        defaultSubcommand: Run.self)
}

/// The worker that runs `callback.deliver` and `http.request` inside the dispatcher, when
/// `FLEET_OUTBOUND_HOSTS` allows anything (otherwise no such job can be submitted). The dispatcher
/// runs them because it already checks their URLs as they are submitted, so the signing and header
/// secrets live in its environment only, and no worker executable has to be deployed for them.
/// `http.request` only when `FLEET_HTTP_JOB_SECRET` is set: each kind is signed with its own secret.
/// Its own libcurl client: calls to others' endpoints never share connections with the providers'.
private func outboundWorker(
    _ outbound: OutboundSettings, settings: FleetSettings, pool: PostgresPool, notifier: Notifier, logger: Logger
) -> [any Service] {
    guard let callbackSigner = outbound.callbackSigner else { return [] }
    // Each kind its own signer: an HTTP job's request never verifies as a callback.
    let http = CurlHTTPClient()
    var handlers: [any JobHandler] = [CallbackDeliveryHandler(
        sender: SignedSender(http: http, policy: outbound.policy, signer: callbackSigner), timeout: outbound.callbackTimeout)]
    var configuration = settings.worker
    configuration.concurrency = [.callbackDeliver: outbound.concurrency]
    if let httpJobSigner = outbound.httpJobSigner {
        handlers.append(HTTPRequestHandler(sender: SignedSender(http: http, policy: outbound.policy, signer: httpJobSigner), secrets: outbound.secrets))
        configuration.concurrency[.httpRequest] = outbound.concurrency
    }
    let runtime = WorkerRuntime(
        executable: "dispatcher", configuration: configuration, executor: pool, notifier: notifier,
        handlers: handlers, logger: logger)
    // Found dead by its lock like any worker (`WorkerLock`): the dispatcher's LISTEN session holds it.
    notifier.runOnEachSession(WorkerLock.sessionStatement(for: runtime.record))
    return [runtime]
}

struct Run: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the dispatcher: the socket server (docs/protocol.md) and the schedule (docs/schedule.md: expire tokens, time out renders, rescue leases, prune).")

    func run() async throws {
        let settings = try FleetProcess.bootstrap(defaultHTTPAddress: ListenAddress(host: "127.0.0.1", port: 9090))
        let socketSettings = try DispatcherSettings.load(from: ProcessInfo.processInfo.environment)
        try socketSettings.validateForServer()
        let renderSettings = try RenderRequestSettings.load(from: ProcessInfo.processInfo.environment)
        let schedule = try MaintenanceTasks.schedule(from: ProcessInfo.processInfo.environment)
        let webhooks = try WebhookSettings.load(from: ProcessInfo.processInfo.environment)
        let providerSettings = try ProviderSettings.load(from: ProcessInfo.processInfo.environment)
        let outbound = try OutboundSettings.load(from: ProcessInfo.processInfo.environment)
        let http = CurlHTTPClient()
        let logger = Logger(label: "dispatcher")
        let pool = settings.makePool(applicationName: "dispatcher")
        let readPool = settings.makeReadPool(applicationName: "dispatcher-read")
        // One set of access tokens for the socket and the console's logins.
        let tokens = AccessTokens(environmentToken: socketSettings.token, store: AccessTokenStore(pool: pool), logger: logger)
        let console = ConsoleRoutes(
            settings: try ConsoleSettings.load(from: ProcessInfo.processInfo.environment), pool: pool, readPool: readPool, tokens: tokens, schedule: schedule,
            liveWorkerWithin: settings.worker.lease * 3, logger: logger)
        let listener = FleetProcess.http(
            settings, pool: pool,
            routes: [WebhookRoutes(settings: webhooks, http: http, store: RenderStore(pool: pool), logger: logger), console], logger: logger)
        try await FleetProcess.run(http: listener, logger: logger) {
            try await FleetProcess.migrate(settings, schema: FleetSchema.migrations, logger: logger)
            try await RenderCapacity(pool: pool).seedDefaults(perRequester: renderSettings.perUserConcurrency)
            let notifier = settings.makeNotifier(logger: logger)
            let stack = try await DispatcherStack.bind(
                pool: pool, readPool: readPool, notifier: notifier, settings: socketSettings, renderSettings: renderSettings,
                liveWorkerWithin: settings.worker.lease * 3, outbound: outbound, tokens: tokens, storage: settings.storage, logger: logger)
            logger.info("dispatcher started", metadata: ["storage": "\(settings.storage.summary)"])
            let tasks = MaintenanceTasks(pool: pool, providers: ProviderCatalog(settings: providerSettings, http: http), logger: logger)
            let scheduler = Scheduler(
                settings: schedule, slots: ScheduleSlots(pool: pool), owner: "dispatcher@\(ProcessInfo.processInfo.hostName):\(getpid())",
                perform: { try await tasks.run($0) }, logger: logger)
            // Dead workers' jobs back within about a second (`WorkerLock`); the schedule's lease
            // rescue stays the guarantee.
            let reaper = WorkerReaper(executor: pool, interval: settings.reaperInterval, logger: logger)
            // The notifier first: a group stops its services in reverse, so it outlives its subscribers.
            return [notifier, scheduler, reaper, QueueGauges(queue: JobQueue(executor: pool, knownKinds: FleetKinds.all), kinds: FleetKinds.all, horizon: pool, logger: logger)]
                + outboundWorker(outbound, settings: settings, pool: pool, notifier: notifier, logger: logger) + stack.services
        }
    }
}
