import ArgumentParser
import FleetCommands
import Shared

@main
struct ImageWorker: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "image-worker",
        abstract: "Normalises uploads and removes garment backgrounds.",
        discussion: settingsNote,
        subcommands: [Run.self, MigrateCommand.self],
        defaultSubcommand: Run.self)
}

struct Run: WorkerRunCommand {
    static let executable = "image-worker"
    static let defaultConcurrency: [JobKind: Int] = [:]
    static func handlers(settings: FleetSettings) -> [any JobHandler] { [] }
}
