import FleetHTTP
import FleetPostgres
import FleetQueue
import FleetStorage
import FleetSupport
import Logging

/// Settings shared by every executable, read from the environment. `docs/configuration.md`
/// lists each variable with its default.
public struct FleetSettings: Sendable {
    /// libpq URI or conninfo; empty means libpq's own defaults and `PG*` variables. Several
    /// hosts with `target_session_attrs=read-write` find the primary on every connect.
    public var databaseURL: String
    /// `FLEET_DATABASE_STATEMENTS`: `unnamed` when `databaseURL` leads to a pooler in
    /// transaction mode (PgBouncer), `prepared` otherwise.
    public var databaseStatements: StatementMode
    /// `FLEET_LISTEN_DATABASE_URL`: where the process's one LISTEN session goes.
    public var listenDatabase: ListenDatabase
    /// `FLEET_READ_DATABASE_URL`: a streaming replica for the dispatcher's reads that decide
    /// nothing (the console's pages, `stats`, `jobs.list`, `audit.list`); nil: the primary.
    public var readDatabaseURL: String?
    /// `FLEET_STORAGE` (or `FLEET_STORAGE_ROOT`) and, for a bucket, the AWS CLI's variables:
    /// where the images live (`StorageLocation`).
    public var storage: StorageLocation
    /// `FLEET_STORAGE_FALLBACK`: while images move between stores, the old one, which reads that
    /// miss in `storage` look in and deletions reach (`FallbackImageStorage`); nil otherwise.
    public var storageFallback: StorageLocation?
    public var logLevel: Logger.Level
    public var logFormat: LogFormat
    public var poolSize: Int
    /// `FLEET_DB_POOL_SIZE` for an executable that names no default of its own.
    public static let defaultPoolSize = 8
    public var worker: WorkerConfiguration
    /// `FLEET_HTTP_ADDRESS`: probes, metrics (and the dispatcher's webhooks); nil when off.
    public var httpAddress: ListenAddress?
    /// `FLEET_HTTP_IDLE_TIMEOUT_SECONDS`, `FLEET_HTTP_MAX_CONNECTIONS`.
    public var httpLimits: HTTPListenerLimits
    /// `FLEET_REAPER_INTERVAL_MS`: how often the dispatcher looks for dead workers (`WorkerReaper`).
    public var reaperInterval: Duration

    public enum LogFormat: String, Sendable { case json, text }

    /// The LISTEN session's database: a session (PostgreSQL, or a pooler in session mode), or
    /// none (`off`: poll-only, every subscriber looks again every `FLEET_POLL_INTERVAL_MS`, and a
    /// worker holds no `WorkerLock`, so its death is found by its leases running out).
    public enum ListenDatabase: Sendable, Equatable {
        case url(String)
        case off
    }

    /// A pool on `databaseURL`, sending statements as `FLEET_DATABASE_STATEMENTS` says.
    public func makePool(maxConnections: Int? = nil, applicationName: String) -> PostgresPool {
        PostgresPool(conninfo: databaseURL, maxConnections: maxConnections ?? poolSize, applicationName: applicationName, statements: databaseStatements)
    }

    /// A small pool on `readDatabaseURL`, nil without one: these reads are few (an operator's
    /// pages, a dashboard's `stats`) and each is answered by one statement.
    public func makeReadPool(applicationName: String) -> PostgresPool? {
        readDatabaseURL.map { PostgresPool(conninfo: $0, maxConnections: 2, applicationName: applicationName, statements: databaseStatements) }
    }

    /// The process's notifier: on the LISTEN database, or poll-only.
    public func makeNotifier(logger: Logger) -> Notifier {
        switch listenDatabase {
        case .url(let url): Notifier(conninfo: url, logger: logger)
        case .off: Notifier.pollOnly(every: worker.pollInterval, logger: logger)
        }
    }

    /// Reads the settings; `defaultConcurrency` (every kind the executable runs),
    /// `defaultHTTPAddress` and `defaultPoolSize` are the executable's own defaults (the dispatcher listens on 127.0.0.1:9090 unless told otherwise; workers, many to a
    /// host, only when told where).
    public static func load(
        from environment: [String: String], defaultConcurrency: [JobKind: Int] = [:], defaultHTTPAddress: ListenAddress? = nil, defaultPoolSize: Int = FleetSettings.defaultPoolSize
    ) throws -> FleetSettings {
        let reader = EnvironmentReader(environment: environment)
        let databaseURL = environment["DATABASE_URL"] ?? ""
        try validate(databaseURL, variable: "DATABASE_URL")
        let listenDatabase: ListenDatabase
        switch environment["FLEET_LISTEN_DATABASE_URL"] {
        case nil, "": listenDatabase = .url(databaseURL)
        case let text? where text.lowercased() == "off": listenDatabase = .off
        case let url?:
            try validate(url, variable: "FLEET_LISTEN_DATABASE_URL")
            listenDatabase = .url(url)
        }
        let readDatabaseURL = environment["FLEET_READ_DATABASE_URL"].flatMap { $0.isEmpty ? nil : $0 }
        if let readDatabaseURL { try validate(readDatabaseURL, variable: "FLEET_READ_DATABASE_URL") }
        // `defaultConcurrency` names the kinds this process runs; one that runs none (the
        // dispatcher) ignores FLEET_CONCURRENCY, so one environment file can serve every process.
        var concurrency = defaultConcurrency
        if !defaultConcurrency.isEmpty {
            for (kind, limit) in try reader.concurrency("FLEET_CONCURRENCY", runs: Set(defaultConcurrency.keys)) { concurrency[kind] = limit }
        }
        let worker = WorkerConfiguration(
            concurrency: concurrency,
            queues: try reader.list("FLEET_QUEUES"),
            lease: try reader.duration("FLEET_LEASE_SECONDS", unit: .seconds(1), default: 30, range: 1...3600),
            pollInterval: try reader.duration("FLEET_POLL_INTERVAL_MS", unit: .milliseconds(1), default: 1000, range: 10...60_000),
            shutdownGrace: try reader.duration("FLEET_SHUTDOWN_GRACE_SECONDS", unit: .seconds(1), default: 25, range: 0...3600),
            retry: RetryPolicy(
                base: try reader.duration("FLEET_RETRY_BASE_MS", unit: .milliseconds(1), default: 2000, range: 1...3_600_000),
                cap: try reader.duration("FLEET_RETRY_CAP_SECONDS", unit: .seconds(1), default: 3600, range: 1...86_400)),
            claimRestartInterval: try reader.duration("FLEET_CLAIM_RESTART_MS", unit: .milliseconds(1), default: 1000, range: 0...60_000))
        let databaseStatements: StatementMode = try reader.choice("FLEET_DATABASE_STATEMENTS", default: .prepared)
        // Unnamed statements mean a transaction pooler, through which a LISTEN (and the worker's
        // session lock) would land on whichever server connection is free: say where it goes.
        if databaseStatements == .unnamed && (environment["FLEET_LISTEN_DATABASE_URL"] ?? "").isEmpty {
            throw ConfigurationError(
                variable: "FLEET_LISTEN_DATABASE_URL",
                reason: "must be set with FLEET_DATABASE_STATEMENTS=unnamed: a direct or session-mode URL for LISTEN, or off (poll-only)")
        }
        return FleetSettings(
            databaseURL: databaseURL,
            databaseStatements: databaseStatements,
            listenDatabase: listenDatabase,
            readDatabaseURL: readDatabaseURL,
            storage: try StorageLocation.load(from: environment),
            storageFallback: try StorageLocation.loadFallback(from: environment),
            logLevel: try reader.choice("FLEET_LOG_LEVEL", default: .info),
            logFormat: try reader.choice("FLEET_LOG_FORMAT", default: .json),
            poolSize: try reader.integer("FLEET_DB_POOL_SIZE", default: defaultPoolSize, range: 1...200),
            worker: worker,
            httpAddress: try reader.listenAddress("FLEET_HTTP_ADDRESS", default: defaultHTTPAddress),
            httpLimits: HTTPListenerLimits(
                idleTimeout: try reader.duration("FLEET_HTTP_IDLE_TIMEOUT_SECONDS", unit: .seconds(1), default: 30, range: 1...3600),
                maxConnections: try reader.integer("FLEET_HTTP_MAX_CONNECTIONS", default: 256, range: 1...100_000)),
            reaperInterval: try reader.duration("FLEET_REAPER_INTERVAL_MS", unit: .milliseconds(1), default: 1000, range: 50...60_000))
    }

    private static func validate(_ conninfo: String, variable: String) throws {
        do {
            try PostgresConnection.validate(conninfo: conninfo)
        } catch PostgresError.invalidConnectionString(let message) {
            throw ConfigurationError(variable: variable, reason: message)
        }
    }
}

extension EnvironmentReader {
    /// `host:port` (`[v6]:port`), or `off`; unset gives `value`.
    public func listenAddress(_ name: String, default value: ListenAddress?) throws -> ListenAddress? {
        guard let text = environment[name], !text.isEmpty else { return value }
        if text.lowercased() == "off" { return nil }
        guard let address = HostAndPort(text) else {
            throw ConfigurationError(variable: name, reason: "'\(text)' is not host:port or off")
        }
        return ListenAddress(host: address.host, port: address.port)
    }
}
