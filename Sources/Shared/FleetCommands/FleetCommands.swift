import ArgumentParser
import FleetPostgres
import FleetQueue
import FleetRuntime
import FleetSchema
import FleetStorage
import Foundation
import Logging

/// `migrate`, the same in every executable.
public struct MigrateCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(commandName: "migrate", abstract: "Apply pending database migrations and exit.")

    public init() {}

    public func run() async throws {
        let settings = try FleetProcess.bootstrap()
        try await FleetProcess.migrate(settings, schema: FleetSchema.migrations, logger: Logger(label: ProcessInfo.processInfo.processName))
    }
}

/// `run` of a worker executable: its name and its handlers are all that differ.
public protocol WorkerRunCommand: AsyncParsableCommand {
    static var executable: String { get }
    static var defaultConcurrency: [JobKind: Int] { get }
    /// `FLEET_DB_POOL_SIZE` unless set: the connections its handlers and the runtime share.
    static var defaultPoolSize: Int { get }
    /// The handlers, given the process's one LISTEN connection (for those that wait on
    /// notifications) and its one pool.
    static func handlers(settings: FleetSettings, resources: WorkerResources) throws -> [any JobHandler]
    /// Connections its handlers hold for long, added to the pool (`FleetProcess.runWorker`).
    static func heldConnections(settings: FleetSettings) -> Int
    /// The image store its jobs read and write, checked before and while it claims; nil: none.
    static func storage(settings: FleetSettings) -> (any ImageStorage)?
}

extension WorkerRunCommand {
    public static var configuration: CommandConfiguration {
        CommandConfiguration(commandName: "run", abstract: "Claim and run jobs until SIGTERM or SIGINT, then drain.")
    }

    public static var defaultPoolSize: Int { FleetSettings.defaultPoolSize }

    public static func heldConnections(settings: FleetSettings) -> Int { 0 }

    public func run() async throws {
        let settings = try FleetProcess.bootstrap(defaultConcurrency: Self.defaultConcurrency, defaultPoolSize: Self.defaultPoolSize)
        try await FleetProcess.runWorker(
            executable: Self.executable, settings: settings, schema: FleetSchema.migrations, storage: Self.storage(settings: settings),
            heldConnections: Self.heldConnections(settings: settings)
        ) { resources in
            try Self.handlers(settings: settings, resources: resources)
        }
    }
}

/// The note every executable's `--help` ends with.
public let settingsNote = "Settings come from the environment (DATABASE_URL, FLEET_*); see docs/configuration.md."
