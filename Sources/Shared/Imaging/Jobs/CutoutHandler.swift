import FleetQueue
import FleetStorage
import FleetSupport
import Foundation

/// `garment.cutout`: removes the background of a normalised garment photo through the
/// backend chain, and stores `garments/{id}_cutout.png` and its preview on white. The result
/// names the backend that produced it and the foreground fraction ("Retake" hint).
public struct CutoutHandler: JobHandler {
    public let kind = JobKind.garmentCutout
    let storage: any ImageStorage
    let chain: BackgroundRemovalChain

    public init(storage: any ImageStorage, chain: BackgroundRemovalChain) {
        self.storage = storage
        self.chain = chain
    }

    public func run(_ job: ClaimedJob, context: JobContext) async throws -> JSONValue? {
        let payload = try job.decodePayload(GarmentCutoutPayload.self)
        let photoPath: String
        do {
            photoPath = try await storage.fileForReading(.garment(user: payload.userId, garment: payload.garmentId))
        } catch let error as StorageError {
            throw JobError.permanent(code: .imageNotFound, message: "\(error)")
        }
        let photo = try Data(contentsOf: URL(fileURLWithPath: photoPath))
        let result: BackgroundRemovalChain.Result
        do {
            result = try await chain.cutout(of: photo, logger: context.logger)
        } catch let error as BackgroundRemovalError {
            if case .rejected = error { throw JobError.permanent(code: error.code, message: "\(error)") }
            throw error  // every backend failed for now: retried with backoff
        } catch let error as ImageError {
            throw JobError.permanent(code: error.code, message: "\(error)")
        }
        let cutoutKey = StorageKey.garmentCutout(user: payload.userId, garment: payload.garmentId)
        let previewKey = StorageKey.garmentPreview(user: payload.userId, garment: payload.garmentId)
        try await storage.write(result.cutout.preview, to: previewKey)
        try await storage.write(result.cutout.png, to: cutoutKey)
        context.logger.info("cut out", metadata: [
            "backend": "\(result.backend)", "path": "\(cutoutKey.relativePath)",
            "foreground_fraction": "\(result.cutout.foregroundFraction)",
        ])
        return .object([
            "cutoutPath": .string(cutoutKey.relativePath), "previewPath": .string(previewKey.relativePath),
            "backend": .string(result.backend), "foregroundFraction": .number(result.cutout.foregroundFraction),
            "width": .number(Double(result.cutout.width)), "height": .number(Double(result.cutout.height)),
            "skippedBackends": .array(result.skipped.map { .string($0) }),
        ])
    }
}
