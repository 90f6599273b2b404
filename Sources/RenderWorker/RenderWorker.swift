import ArgumentParser
import FleetHTTPClient
import FleetObjectStore
import FleetPostgres
import FleetQueue
import FleetRuntime
import FleetStorage
import FleetSupport
import Foundation
import Imaging
import FleetCommands
import Providers
import Renders

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
    /// A render mostly waits on its provider: hundreds fit in one process.
    static let defaultConcurrency: [JobKind: Int] = [.renderRun: 200]
    /// Each render starts, records its submission and ends through the pool the claims use.
    static let defaultPoolSize = 16
    static func storage(settings: FleetSettings) -> (any ImageStorage)? { settings.storage.makeImageStorage(fallback: settings.storageFallback) }
    static func handlers(settings: FleetSettings, resources: WorkerResources) throws -> [any JobHandler] {
        let environment = ProcessInfo.processInfo.environment
        let reader = EnvironmentReader(environment: environment)
        let http = CurlHTTPClient(maxConnectionsPerHost: 256)
        // Hundreds of renders at once: each result's re-encode runs single-threaded.
        try Vips.shareCores(among: settings.worker.concurrency[.renderRun] ?? 1)
        // Runs in the worker's group (`RenderHandler.services`).
        let events = RenderEvents(notifier: resources.notifier)
        let options = RenderOptions(
            webhookURL: environment["FLEET_RENDER_WEBHOOK_URL"].flatMap { $0.isEmpty ? nil : $0 },
            webhookGrace: try reader.duration("FLEET_RENDER_WEBHOOK_GRACE_MS", unit: .milliseconds(1), default: 8000, range: 0...60_000),
            pollInterval: try reader.duration("FLEET_RENDER_POLL_MS", unit: .milliseconds(1), default: 2000, range: 50...60_000))
        return [RenderHandler(
            store: RenderStore(pool: resources.pool), storage: settings.storage.makeImageStorage(fallback: settings.storageFallback, http: http),
            providers: ProviderCatalog(settings: try ProviderSettings.load(from: environment), http: http),
            fetcher: ProviderImageFetcher(http: http), events: events, options: options)]
    }
}
