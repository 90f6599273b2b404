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
    /// The handlers, given the process's one LISTEN connection for those that wait on notifications.
    static func handlers(settings: FleetSettings, notifier: Notifier) throws -> [any JobHandler]
    /// The image store its jobs read and write, checked before and while it claims; nil: none.
    static func storage(settings: FleetSettings) -> (any ImageStorage)?
}

extension WorkerRunCommand {
    public static var configuration: CommandConfiguration {
        CommandConfiguration(commandName: "run", abstract: "Claim and run jobs until SIGTERM or SIGINT, then drain.")
    }

    public func run() async throws {
        let settings = try FleetProcess.bootstrap(defaultConcurrency: Self.defaultConcurrency)
        try await FleetProcess.runWorker(executable: Self.executable, settings: settings, schema: FleetSchema.migrations, storage: Self.storage(settings: settings)) { notifier in
            try Self.handlers(settings: settings, notifier: notifier)
        }
    }
}

/// The note every executable's `--help` ends with.
public let settingsNote = "Settings come from the environment (DATABASE_URL, FLEET_*); see docs/configuration.md."
