import FleetHTTP
import FleetPostgres
import FleetStorage
import FleetTracing
import FleetQueue
import Foundation
import Logging
import ServiceLifecycle

/// Start-up shared by the executables: settings, logging, metrics, migrations, signals.
public enum FleetProcess {
    /// Reads the settings and installs logging, metrics and (when `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// is set) tracing. A bad setting throws, naming its variable.
    public static func bootstrap(
        defaultConcurrency: [JobKind: Int] = [:], defaultHTTPAddress: ListenAddress? = nil, defaultPoolSize: Int = FleetSettings.defaultPoolSize
    ) throws -> FleetSettings {
        let environment = ProcessInfo.processInfo.environment
        let settings = try FleetSettings.load(
            from: environment, defaultConcurrency: defaultConcurrency, defaultHTTPAddress: defaultHTTPAddress, defaultPoolSize: defaultPoolSize)
        let traced = TracingConfiguration.isEnabled(environment)
        FleetLogging.bootstrap(format: settings.logFormat, level: settings.logLevel, metadataProvider: traced ? .traceContext : nil)
        FleetMetrics.bootstrap()
        try ProcessTracing.bootstrap(environment)
        return settings
    }

    /// Applies `schema`'s pending migrations (the executable's: `FleetSchema.migrations`), waiting
    /// up to `patience` for a database that is still starting.
    public static func migrate(_ settings: FleetSettings, schema: [Migration], logger: Logger, patience: Duration = .seconds(30)) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now + patience
        while true {
            do {
                try await Migrator(migrations: schema, logger: logger)
                    .migrate(conninfo: settings.databaseURL, statements: settings.databaseStatements)
                return
            } catch let error as PostgresError where error.isTransient && clock.now < deadline {
                logger.warning("database not reachable yet; retrying", metadata: ["error": "\(error)"])
                try await Task.sleep(for: .seconds(1))
            }
        }
    }

    /// Runs a worker executable until SIGTERM/SIGINT, then drains it. `makeHandlers` gets the
    /// process's one LISTEN connection, which the worker runtime subscribes to as well, and its
    /// one pool, which the runtime claims and ends jobs through: `FLEET_DB_POOL_SIZE`
    /// connections, plus `heldConnections` for handlers that hold one for long (a purge holds its
    /// own while it deletes files), so claims always find one.
    /// With `storage` (the workers whose jobs read or write images) in a bucket, the store is
    /// checked before the first claim and while the worker runs (`StorageReadiness`).
    public static func runWorker(
        executable: String, settings: FleetSettings, schema: [Migration], storage: (any ImageStorage)? = nil, heldConnections: Int = 0,
        handlers makeHandlers: (WorkerResources) throws -> [any JobHandler]
    ) async throws {
        let logger = Logger(label: executable)
        let pool = settings.makePool(maxConnections: settings.poolSize + heldConnections, applicationName: executable)
        let notifier = settings.makeNotifier(logger: logger)
        let handlers = try makeHandlers(WorkerResources(notifier: notifier, pool: pool))
        // A bucket's wrong keys or unreachable endpoint stop claims altogether, the fallback's as
        // well as the store's (a read that misses goes there); a file tree's outages are met by
        // each job instead (deferred, docs/images.md, "Storage outages"), and the handlers say so
        // on /readyz while one is on.
        let locations = [settings.storage] + (settings.storageFallback.map { [$0] } ?? [])
        let storageReadiness: StorageReadiness? = if locations.contains(where: \.isBucket), let storage {
            StorageReadiness(storage: storage, summary: locations.map(\.summary).joined(separator: ", falling back to "), logger: logger)
        } else {
            nil
        }
        let checks: [any ReadinessCheck] = handlers.map(HandlerReadiness.init) + (storageReadiness.map { [$0] } ?? [])
        if storage != nil, let fallback = settings.storageFallback {
            logger.notice("storage fallback on: reads that miss in the store look in the fallback, deletions reach both; remove FLEET_STORAGE_FALLBACK once the copy is done", metadata: [
                "storage": "\(settings.storage.summary)", "fallback": "\(fallback.summary)",
            ])
        }
        try await run(http: http(settings, pool: pool, checks: checks, logger: logger), logger: logger) {
            try await migrate(settings, schema: schema, logger: logger)
            await storageReadiness?.check()
            let runtime = WorkerRuntime(
                executable: executable, configuration: settings.worker, executor: pool,
                notifier: notifier, handlers: handlers, logger: logger, mayClaim: { storageReadiness?.isReachable ?? true })
            // The LISTEN session holds the worker's lock: the dispatcher's reaper takes its jobs back
            // as soon as the process dies (`WorkerLock`). Poll-only, there is no session to hold it,
            // and the worker's leases are the guarantee.
            notifier.runOnEachSession(WorkerLock.sessionStatement(for: runtime.record))
            // The notifier first, then what the handlers need running (their waiters): a group stops
            // its services in reverse, so they outlive the runtime's drain.
            return [notifier] + (storageReadiness.map { [$0] } ?? []) + handlers.flatMap(\.services) + [runtime]
        }
    }

    /// The executable's HTTP side when `FLEET_HTTP_ADDRESS` is on, serving the process's metrics;
    /// `checks` are `/readyz`'s beside its own.
    public static func http(
        _ settings: FleetSettings, pool: PostgresPool, routes: [any HTTPRoutes] = [], checks: [any ReadinessCheck] = [], logger: Logger
    ) -> ProcessHTTP? {
        settings.httpAddress.map {
            ProcessHTTP(
                address: $0, limits: settings.httpLimits, pool: pool, registry: FleetMetrics.registry, routes: routes, checks: checks,
                logger: logger)
        }
    }


    /// Runs until SIGTERM or SIGINT starts the graceful shutdown. The HTTP side (when there is
    /// one) answers from the start, `/readyz` saying "starting" while `startup` applies the
    /// migrations and builds the services (a long migration must not look like a dead process);
    /// then the services run.
    public static func run(
        http: ProcessHTTP?, logger: Logger, startup: @escaping @Sendable () async throws -> [any Service]
    ) async throws {
        let main = StartupThenServices(startup: startup, started: http?.started, logger: logger)
        var all = http?.around([main]) ?? [main]
        // The trace exporter first: a group stops its services in reverse, so it sends the drain's spans.
        if let exporter = ProcessTracing.takeExporter() { all.insert(exporter, at: 0) }
        let group = ServiceGroup(configuration: .init(
            services: all.map { .init(service: $0) }, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await group.run()
    }
}

/// Start-up, then the services it built as a group of their own (which drains when the
/// process's group does).
private struct StartupThenServices: Service {
    let startup: @Sendable () async throws -> [any Service]
    let started: StartupSignal?
    let logger: Logger

    func run() async throws {
        let services: [any Service]
        do {
            services = try await cancelWhenGracefulShutdown { try await startup() }
        } catch is CancellationError {
            logger.info("stopped before start-up finished")
            return
        }
        started?.markStarted()
        try await ServiceGroup(configuration: .init(services: services.map { .init(service: $0) }, logger: logger)).run()
    }
}

/// A handler's own condition (`JobHandler.unreadyReason`: its store refusing writes) as one of
/// `/readyz`'s checks.
struct HandlerReadiness: ReadinessCheck {
    let handler: any JobHandler

    func unreadyReason() async -> String? { await handler.unreadyReason }
}

/// What a worker's handlers are made with: the process's one LISTEN connection and its one pool
/// (the runtime's, so one process opens `FLEET_DB_POOL_SIZE` connections and no more).
public struct WorkerResources: Sendable {
    public let notifier: Notifier
    public let pool: PostgresPool
}
