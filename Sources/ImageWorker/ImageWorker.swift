import ArgumentParser
import Logging
import Shared

@main
struct ImageWorker: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "image-worker",
        abstract: "Normalises uploads and removes garment backgrounds.",
        discussion: "Settings come from the environment (DATABASE_URL, FLEET_*); see docs/configuration.md.",
        subcommands: [Run.self, Migrate.self],
        defaultSubcommand: Run.self)
}

struct Run: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Claim and run jobs until SIGTERM or SIGINT, then drain.")

    func run() async throws {
        let settings = try FleetProcess.bootstrap()
        try await FleetProcess.runWorker(executable: "image-worker", settings: settings, handlers: [])
    }
}

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Apply pending database migrations and exit.")

    func run() async throws {
        let settings = try FleetProcess.bootstrap()
        try await FleetProcess.migrate(settings, logger: Logger(label: "image-worker"))
    }
}
