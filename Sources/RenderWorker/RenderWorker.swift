import ArgumentParser
import FleetCommands
import Shared

@main
struct RenderWorker: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "render-worker",
        abstract: "Runs try-on renders: submits to the provider, enforces the deadline, settles credits.",
        discussion: settingsNote,
        subcommands: [Run.self, MigrateCommand.self],
        defaultSubcommand: Run.self)
}

struct Run: WorkerRunCommand {
    static let executable = "render-worker"
    static let defaultConcurrency: [JobKind: Int] = [:]
    static func handlers(settings: FleetSettings) -> [any JobHandler] { [] }
}
