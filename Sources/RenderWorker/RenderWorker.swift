import ArgumentParser
import Logging
import Shared

@main
struct RenderWorker: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "render-worker",
        abstract: "Runs try-on renders: submits to the provider, enforces the deadline, settles credits.",
        discussion: "Settings come from the environment (DATABASE_URL, FLEET_*); see docs/configuration.md.",
        subcommands: [Run.self, Migrate.self],
        defaultSubcommand: Run.self)
}

struct Run: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Claim and run jobs until SIGTERM or SIGINT, then drain.")

    func run() async throws {
        let settings = try FleetProcess.bootstrap()
        try await FleetProcess.runWorker(executable: "render-worker", settings: settings, handlers: [])
    }
}

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Apply pending database migrations and exit.")

    func run() async throws {
        let settings = try FleetProcess.bootstrap()
        try await FleetProcess.migrate(settings, logger: Logger(label: "render-worker"))
    }
}
