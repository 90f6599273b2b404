import FleetQueue
import FleetStorage

/// The image worker's kinds.
extension JobKind {
    public static let imageNormalize = NormalizeImagePayload.kind
    public static let garmentCutout = GarmentCutoutPayload.kind
    public static let accountPurge = PurgeAccountPayload.kind
}

/// What an image is normalised into.
public enum ImageTarget: String, Codable, Sendable {
    case body, garment
}

/// `image.normalize`'s payload: written by the dispatcher, read by the image worker.
public struct NormalizeImagePayload: JobPayload, Equatable {
    public static let kind: JobKind = "image.normalize"
    public static let summary = "image worker: normalise an upload with a named profile (default upload: at most 1200 px wide, JPEG quality 80)"
    public let userId: StorageID
    public let uploadId: StorageID
    public let target: ImageTarget
    /// The body photo's or the garment's id.
    public let imageId: StorageID
    /// Garments only (`garment.process` sets it): once normalised, the image worker enqueues a
    /// `garment.cutout` job to remove the background.
    public let thenCutout: Bool?
    /// The `NormalizeProfiles` name; nil: `upload`. Looked up when the job runs, so a profile
    /// changed in `fleet_settings` applies to jobs already queued.
    public let profile: String?

    public init(userId: StorageID, uploadId: StorageID, target: ImageTarget, imageId: StorageID, thenCutout: Bool? = nil, profile: String? = nil) {
        self.userId = userId
        self.uploadId = uploadId
        self.target = target
        self.imageId = imageId
        self.thenCutout = thenCutout
        self.profile = profile
    }
}

/// `garment.cutout`'s payload: enqueued by the image worker once a garment is normalised, or by
/// a render request that carries the garment's upload (after the garment's normalisation).
public struct GarmentCutoutPayload: JobPayload, Equatable {
    public static let kind: JobKind = "garment.cutout"
    public static let summary = "image worker: remove a garment photo's background (cut-out PNG, preview, foreground fraction)"
    public let userId: StorageID
    public let garmentId: StorageID
    /// When every backend fails: complete with a result saying there is no cut-out
    /// (`CutoutResult.noCutout`) instead of retrying with backoff. Set for a render's input: the
    /// render's 30 s leave no time for backoff, and it proceeds with the normalised photo.
    public let completeWithoutCutout: Bool?

    public init(userId: StorageID, garmentId: StorageID, completeWithoutCutout: Bool? = nil) {
        self.userId = userId
        self.garmentId = garmentId
        self.completeWithoutCutout = completeWithoutCutout
    }
}

/// `account.purge`'s payload.
public struct PurgeAccountPayload: JobPayload, Equatable {
    public static let kind: JobKind = "account.purge"
    public static let summary = "image worker: delete every file of one user (account deletion)"
    public let userId: StorageID

    public init(userId: StorageID) { self.userId = userId }
}
