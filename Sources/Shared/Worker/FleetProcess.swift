import FleetHTTP
import Foundation
import Logging
import ServiceLifecycle

/// Start-up shared by the executables: settings, logging, metrics, migrations, signals.
public enum FleetProcess {
    /// Reads the settings and installs logging and metrics. A bad setting throws, naming its variable.
    public static func bootstrap(
        defaultConcurrency: [JobKind: Int] = [:], defaultHTTPAddress: ListenAddress? = nil
    ) throws -> FleetSettings {
        let settings = try FleetSettings.load(
            from: ProcessInfo.processInfo.environment, defaultConcurrency: defaultConcurrency, defaultHTTPAddress: defaultHTTPAddress)
        FleetLogging.bootstrap(format: settings.logFormat, level: settings.logLevel)
        FleetMetrics.bootstrap()
        return settings
    }

    /// Applies pending migrations, waiting up to `patience` for a database that is still starting.
    public static func migrate(_ settings: FleetSettings, logger: Logger, patience: Duration = .seconds(30)) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now + patience
        while true {
            do {
                try await Migrator(logger: logger).migrate(conninfo: settings.databaseURL)
                return
            } catch let error as PostgresError where error.isTransient && clock.now < deadline {
                logger.warning("database not reachable yet; retrying", metadata: ["error": "\(error)"])
                try await Task.sleep(for: .seconds(1))
            }
        }
    }

    /// Runs a worker executable until SIGTERM/SIGINT, then drains it.
    public static func runWorker(
        executable: String, settings: FleetSettings, handlers: [any JobHandler]
    ) async throws {
        let logger = Logger(label: executable)
        try await migrate(settings, logger: logger)
        let pool = PostgresPool(conninfo: settings.databaseURL, maxConnections: settings.poolSize, applicationName: executable)
        let runtime = WorkerRuntime(
            executable: executable, configuration: settings.worker, driver: PostgresQueueDriver(pool: pool),
            conninfo: settings.databaseURL, handlers: handlers, logger: logger)
        try await runServices([runtime], http: http(settings, pool: pool, logger: logger), logger: logger)
    }

    /// The executable's HTTP side when `FLEET_HTTP_ADDRESS` is on, serving the process's metrics.
    public static func http(
        _ settings: FleetSettings, pool: PostgresPool, routes: [any HTTPRoutes] = [], logger: Logger
    ) -> ProcessHTTP? {
        settings.httpAddress.map {
            ProcessHTTP(address: $0, pool: pool, registry: FleetMetrics.registry, routes: routes, logger: logger)
        }
    }

    /// Runs services (wrapped by `http` when there is one) until SIGTERM or SIGINT starts their
    /// graceful shutdown.
    public static func runServices(_ services: [any Service], http: ProcessHTTP? = nil, logger: Logger) async throws {
        let all = http?.around(services) ?? services
        let group = ServiceGroup(configuration: .init(
            services: all.map { .init(service: $0) }, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await group.run()
    }
}
