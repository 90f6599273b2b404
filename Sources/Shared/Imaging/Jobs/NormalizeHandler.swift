import FleetQueue
import FleetStorage
import FleetSupport
import Foundation

/// `image.normalize`: reads an upload from storage, normalises it with the job's profile, and
/// stores the JPEG as a body photo or a garment photo. Bad images and unknown profiles end the
/// job at once with their code; the upload is never modified. A garment's cut-out is a job
/// enqueued with this one (`garment.process`, a render's inputs), except for a payload of the
/// previous release's form, with `thenCutout`, whose cut-out this handler enqueues.
public struct NormalizeHandler: JobHandler {
    public let kind = JobKind.imageNormalize
    let storage: any ImageStorage
    /// The limits; its profile is replaced by the job's.
    let normalizer: ImageNormalizer
    /// Read for every job, so an operator's change to `fleet_settings` needs no restart.
    let profiles: any NormalizeProfileSource
    /// A photo the store refuses for an outage defers the job instead of spending its attempt.
    let outage: StorageOutage

    public init(storage: any ImageStorage, normalizer: ImageNormalizer, profiles: any NormalizeProfileSource, outage: StorageOutage = StorageOutage()) {
        self.storage = storage
        self.normalizer = normalizer
        self.profiles = profiles
        self.outage = outage
    }

    public var unreadyReason: String? { outage.unreadyReason }

    public func run(_ job: ClaimedJob, context: JobContext) async throws -> JSONValue? {
        let payload = try job.decodePayload(NormalizeImagePayload.self)
        if payload.thenCutout == true && payload.target != .garment {
            throw JobError.permanent(code: .badPayload, message: "thenCutout applies to garments only")
        }
        let profile: NormalizeProfile
        do {
            profile = try await profiles.profiles().profile(named: payload.profile)
        } catch let error as NormalizeProfileError {
            switch error {
            case .unknown: throw JobError.permanent(code: .imageProfileUnknown, message: "\(error)")
            // Broken settings are the operator's to fix: the job waits for them with backoff.
            case .invalid: throw JobError.retryable("\(error)")
            }
        }
        let upload = StorageKey.upload(user: payload.userID, upload: payload.uploadID)
        let normalizer = self.normalizer.with(profile)
        let image: NormalizedImage
        do {
            // An upload over the limit is refused by the read (`StorageError.tooLarge`), on its
            // size known before its bytes are fetched: no separate size request.
            image = try await outage.deferringOutages(.read) {
                try await storage.withFileForReading(upload, maxBytes: normalizer.limits.maxBytes) { input in
                    try await offload { try normalizer.normalize(path: input) }
                }
            }
        } catch let error as StorageError {
            if case .tooLarge = error { throw JobError.permanent(code: .imageTooLarge, message: "\(error)") }
            throw JobError.permanent(code: .imageNotFound, message: "\(error)")
        } catch let error as ImageError {
            throw JobError.permanent(code: error.code, message: error.reason)
        }
        let output: StorageKey = switch payload.target {
        case .body: .bodyPhoto(user: payload.userID, photo: payload.imageID)
        case .garment: .garment(user: payload.userID, garment: payload.imageID)
        }
        try await outage.deferringOutages(.write) { try await storage.write(image.jpeg, to: output) }
        context.logger.info("normalised", metadata: ["path": "\(output.relativePath)", "width": "\(image.width)", "height": "\(image.height)"])
        var result: [String: JSONValue] = [
            "path": .string(output.relativePath), "width": .number(Double(image.width)),
            "height": .number(Double(image.height)), "bytes": .number(Double(image.jpeg.count)),
            "profile": .string(payload.profile ?? NormalizeProfiles.defaultName),
        ]
        if payload.thenCutout == true {
            // Still needed, though no dispatcher of this release writes the flag: without it, the
            // jobs queued before the upgrade, and those a dispatcher of the previous release sends
            // while a rolling restart (or a rollback) runs both side by side, would end without
            // their cut-out, silently. A migration could rewrite the queued ones, not those.
            // Keyed by this job: a retried or rescued run finds the job it already enqueued.
            let cutout = try await context.queue.enqueue(NewJob(
                GarmentCutoutPayload(userID: payload.userID, garmentID: payload.imageID),
                priority: job.priority, idempotencyKey: "garment.cutout:after:\(job.id)"))
            result["cutoutJobId"] = .number(Double(cutout.id))
        }
        return .object(result)
    }
}
