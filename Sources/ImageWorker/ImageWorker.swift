import ArgumentParser
import Foundation
import FleetCommands
import Shared

@main
struct ImageWorker: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "image-worker",
        abstract: "Normalises uploads and removes garment backgrounds.",
        discussion: settingsNote,
        subcommands: [Run.self, Normalize.self, MigrateCommand.self],
        defaultSubcommand: Run.self)
}

struct Run: WorkerRunCommand {
    static let executable = "image-worker"
    static let defaultConcurrency: [JobKind: Int] = [.imageNormalize: 2, .accountPurge: 4]
    static func handlers(settings: FleetSettings) -> [any JobHandler] {
        let storage = FileImageStorage(root: settings.storageRoot)
        return [NormalizeHandler(storage: storage, normalizer: ImageNormalizer()), PurgeHandler(storage: storage)]
    }
}

/// The normalise pipeline on one file, without the queue.
struct Normalize: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Normalise one image: at most 1200 px wide, EXIF orientation applied, sRGB, no metadata, JPEG quality 80.",
        discussion: "On bad input it prints the error code (IMAGE_TOO_LARGE, IMAGE_INVALID, IMAGE_UNSUPPORTED) and exits 1; the input is never touched.")

    @Argument(help: "The upload to read.") var input: String
    @Argument(help: "Where to write the JPEG (replaced atomically).") var output: String
    @Option(help: "Refuse files larger than this many bytes.") var maxBytes = ImageLimits().maxBytes
    @Option(help: "Refuse images with more pixels than this.") var maxPixels = ImageLimits().maxPixels

    func run() throws {
        let normalizer = ImageNormalizer(limits: ImageLimits(maxBytes: maxBytes, maxPixels: maxPixels))
        do {
            let image = try normalizer.normalize(path: input)
            try AtomicFile.write(image.jpeg, to: output)
            print("\(output): \(image.width)x\(image.height), \(image.jpeg.count) bytes")
        } catch let error as ImageError {
            FileHandle.standardError.write(Data("\(error)\n".utf8))
            throw ExitCode.failure
        }
    }
}
