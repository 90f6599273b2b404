import ArgumentParser
import FleetCommands
import FleetHTTPClient
import FleetObjectStore
import FleetPostgres
import FleetQueue
import FleetRuntime
import FleetStorage
import FleetSupport
import Foundation
import Imaging
import Logging
import RenderLedger

@main
struct ImageWorker: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "image-worker",
        abstract: "Normalises uploads and removes garment backgrounds.",
        discussion: settingsNote,
        subcommands: [Run.self, Normalize.self, CutoutCommand.self, MigrateCommand.self],
        defaultSubcommand: Run.self)
}

struct Run: WorkerRunCommand {
    static let executable = "image-worker"
    /// Cut-outs mostly wait on the network, so more of them run at once than CPU-bound normalises.
    static let defaultConcurrency: [JobKind: Int] = [.imageNormalize: 2, .garmentCutout: 8, .accountPurge: 4]
    static func storage(settings: FleetSettings) -> (any ImageStorage)? { settings.storage.makeImageStorage(fallback: settings.storageFallback) }
    /// A purge holds its connection while it deletes the files (the rows naming the trees stay
    /// locked until they are gone): one more connection per purge running at once.
    static func heldConnections(settings: FleetSettings) -> Int { settings.worker.concurrency[.accountPurge] ?? 0 }
    static func handlers(settings: FleetSettings, resources: WorkerResources) throws -> [any JobHandler] {
        let storage = settings.storage.makeImageStorage(fallback: settings.storageFallback)
        try Vips.shareCores(among: settings.worker.concurrency[.imageNormalize] ?? 1)
        let removal = try BackgroundRemovalSettings.load(from: ProcessInfo.processInfo.environment)
        // The process's one outage: a refused write by either kind defers both (one store).
        let outage = StorageOutage()
        return [
            NormalizeHandler(storage: storage, normalizer: ImageNormalizer(), profiles: StoredNormalizeProfiles(pool: resources.pool), outage: outage),
            CutoutHandler(storage: storage, chain: try removal.makeChain(http: CurlHTTPClient()), outage: outage),
            PurgeHandler(storage: storage, accounts: AccountErasure(pool: resources.pool)),
        ]
    }
}

/// The normalise pipeline on one file, without the queue.
struct Normalize: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Normalise one image with a profile (default upload: at most 1200 px wide, JPEG quality 80), EXIF orientation applied, sRGB, no metadata.",
        discussion: """
            Profiles: the built-in upload, trial-room and thumb (docs/images.md); with --from-settings, also those \
            in fleet_settings (DATABASE_URL). On bad input it prints the error code (IMAGE_TOO_LARGE, IMAGE_INVALID, \
            IMAGE_UNSUPPORTED, IMAGE_PROFILE_UNKNOWN) and exits 1; the input is never touched.
            """)

    @Argument(help: "The upload to read.") var input: String
    @Argument(help: "Where to write the JPEG (replaced atomically).") var output: String
    @Option(help: "Refuse files larger than this many bytes.") var maxBytes = ImageLimits().maxBytes
    @Option(help: "Refuse images with more pixels than this.") var maxPixels = ImageLimits().maxPixels
    @Option(help: "The profile: upload, trial-room, thumb, or one stored in fleet_settings (with --from-settings).")
    var profile = NormalizeProfiles.defaultName
    @Flag(help: "Read the profiles from fleet_settings (DATABASE_URL) as the fleet does, not only the built-in ones.")
    var fromSettings = false

    func run() async throws {
        do {
            let profiles: NormalizeProfiles = if fromSettings {
                try await StoredNormalizeProfiles(pool: FleetSettings.load(from: ProcessInfo.processInfo.environment)
                    .makePool(maxConnections: 1, applicationName: "image-worker normalize")).profiles()
            } else {
                .builtIn
            }
            let normalizer = ImageNormalizer(limits: ImageLimits(maxBytes: maxBytes, maxPixels: maxPixels), profile: try profiles.profile(named: profile))
            let image = try normalizer.normalize(path: input)
            try AtomicFile.write(image.jpeg, to: output)
            print("\(output): \(image.width)x\(image.height), \(image.jpeg.count) bytes")
        } catch let error as ImageError {
            FileHandle.standardError.write(Data("\(error)\n".utf8))
            throw ExitCode.failure
        } catch let error as NormalizeProfileError {
            let code = switch error {
            case .unknown: "\(JobErrorCode.imageProfileUnknown): "
            case .invalid: ""
            }
            FileHandle.standardError.write(Data("\(code)\(error)\n".utf8))
            throw ExitCode.failure
        }
    }
}

/// Background removal on one photo, without the queue.
struct CutoutCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cutout",
        abstract: "Remove the background of one garment photo: writes cutout.png and preview.jpg into OUTDIR.",
        discussion: """
            The photo is normalised first, as the queue's pipeline does. Backends and their order come from \
            FLEET_CUTOUT_BACKENDS, REPLICATE_API_TOKEN and FLEET_REMBG_URL (docs/configuration.md); --backend \
            uses one alone. On failure it prints the error code and exits 1.
            """)

    @Argument(help: "The garment photo.") var input: String
    @Argument(help: "The directory to write cutout.png and preview.jpg into (created if missing).") var outputDirectory: String
    @Option(help: "Use only this backend: replicate, rembg or local.") var backend: BackgroundRemovalSettings.Backend?

    func run() async throws {
        do {
            let removal = try BackgroundRemovalSettings.load(from: ProcessInfo.processInfo.environment)
            let chain = try removal.makeChain(http: CurlHTTPClient(), only: backend)
            let photo = try ImageNormalizer().normalize(path: input).jpeg
            let result = try await chain.cutout(of: photo, logger: Logger(label: "image-worker.cutout"))
            try FileManager.default.createDirectory(atPath: outputDirectory, withIntermediateDirectories: true)
            let cutoutPath = (outputDirectory as NSString).appendingPathComponent("cutout.png")
            let previewPath = (outputDirectory as NSString).appendingPathComponent("preview.jpg")
            try AtomicFile.write(result.cutout.png, to: cutoutPath)
            try AtomicFile.write(result.cutout.preview, to: previewPath)
            print("\(cutoutPath): \(result.cutout.width)x\(result.cutout.height), backend \(result.backend), foreground \(String(format: "%.3f", result.cutout.foregroundFraction))")
            print(previewPath)
        } catch let error as ImageError {
            FileHandle.standardError.write(Data("\(error)\n".utf8))
            throw ExitCode.failure
        } catch let error as BackgroundRemovalError {
            FileHandle.standardError.write(Data("\(error)\n".utf8))
            throw ExitCode.failure
        }
    }
}

extension BackgroundRemovalSettings.Backend: ExpressibleByArgument {}
