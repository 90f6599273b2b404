import FleetQueue
import FleetStorage
import FleetSupport
import Foundation

/// `garment.cutout`: removes the background of a normalised garment photo through the
/// backend chain, and stores `garments/{id}_cutout.png` and its preview on white. The result
/// says whether there is a cut-out (`cutout`), names the backend that produced it and the
/// foreground fraction ("Retake" hint). With `completeWithoutCutout` (a render's input), a chain
/// whose every backend failed completes the job with `cutout: false` instead of retrying it.
public struct CutoutHandler: JobHandler {
    public let kind = JobKind.garmentCutout
    let storage: any ImageStorage
    let chain: BackgroundRemovalChain
    /// A cut-out the store refuses for an outage defers the job instead of spending its attempt
    /// (the backend is asked again when it runs: the cut-out is not kept in memory meanwhile).
    let outage: StorageOutage

    public init(storage: any ImageStorage, chain: BackgroundRemovalChain, outage: StorageOutage = StorageOutage()) {
        self.storage = storage
        self.chain = chain
        self.outage = outage
    }

    public var unreadyReason: String? { outage.unreadyReason }

    public func run(_ job: ClaimedJob, context: JobContext) async throws -> JSONValue? {
        let payload = try job.decodePayload(GarmentCutoutPayload.self)
        let photo: Data
        do {
            // A normalised photo: far below the upload's limit, which bounds the read all the same.
            photo = try await outage.deferringOutages(.read) {
                try await storage.read(.garment(user: payload.userID, garment: payload.garmentID), maxBytes: ImageLimits().maxBytes)
            }
        } catch let error as StorageError {
            throw JobError.permanent(code: .imageNotFound, message: "\(error)")
        }
        let result: BackgroundRemovalChain.Result
        do {
            result = try await chain.cutout(of: photo, logger: context.logger)
        } catch let error as BackgroundRemovalError {
            if case .rejected = error { throw JobError.permanent(code: error.code, message: "\(error)") }
            if case .unavailable(let reasons) = error, payload.completeWithoutCutout == true {
                context.logger.warning("no cut-out: every backend failed", metadata: ["reasons": "\(reasons)"])
                return .object([
                    CutoutResult.cutoutField: .bool(false), "code": .string(error.code.rawValue),
                    "failedBackends": .array(reasons.map { .string($0) }),
                ])
            }
            throw error  // every backend failed for now: retried with backoff
        } catch let error as ImageError {
            throw JobError.permanent(code: error.code, message: error.reason)
        }
        let cutoutKey = StorageKey.garmentCutout(user: payload.userID, garment: payload.garmentID)
        let previewKey = StorageKey.garmentPreview(user: payload.userID, garment: payload.garmentID)
        try await outage.deferringOutages(.write) {
            try await storage.write(result.cutout.preview, to: previewKey)
            try await storage.write(result.cutout.png, to: cutoutKey)
        }
        context.logger.info("cut out", metadata: [
            "backend": "\(result.backend)", "path": "\(cutoutKey.relativePath)",
            "foreground_fraction": "\(result.cutout.foregroundFraction)",
        ])
        return .object([
            CutoutResult.cutoutField: .bool(true), "cutoutPath": .string(cutoutKey.relativePath), "previewPath": .string(previewKey.relativePath),
            "backend": .string(result.backend), "foregroundFraction": .number(result.cutout.foregroundFraction),
            "width": .number(Double(result.cutout.width)), "height": .number(Double(result.cutout.height)),
            "skippedBackends": .array(result.skipped.map { .string($0) }),
        ])
    }
}

/// What a `garment.cutout` job's result says to a job that runs after it (the render).
public enum CutoutResult {
    /// The result's field: true when the cut-out was stored, false when every backend failed
    /// (`completeWithoutCutout`).
    public static let cutoutField = "cutout"

    /// Whether the job's result (JSON text) says a cut-out was stored; nil when it does not say
    /// (a result of a version that did not write the field: it stored a cut-out whenever it completed).
    public static func madeCutout(_ result: String?) -> Bool? {
        guard let result, case .object(let fields)? = try? JSONDecoder().decode(JSONValue.self, from: Data(result.utf8)) else { return nil }
        guard case .bool(let made)? = fields[cutoutField] else { return nil }
        return made
    }
}
