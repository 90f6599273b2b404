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
    public let userID: StorageID
    public let uploadID: StorageID
    public let target: ImageTarget
    /// The body photo's or the garment's id.
    public let imageID: StorageID
    /// Garments only: once normalised, the image worker enqueues a `garment.cutout` job to remove
    /// the background. `garment.process` no longer sets it (it enqueues the cut-out with the
    /// normalisation, as a graph); the worker still honours it for the payloads that carry it:
    /// jobs queued before the upgrade, sent by a dispatcher of the previous release during a
    /// rolling restart (dispatchers first, then workers) or after a rollback, and raw `enqueue`s.
    public let thenCutout: Bool?
    /// The `NormalizeProfiles` name; nil: `upload`. Looked up when the job runs, so a profile
    /// changed in `fleet_settings` applies to jobs already queued.
    public let profile: String?

    public init(userID: StorageID, uploadID: StorageID, target: ImageTarget, imageID: StorageID, thenCutout: Bool? = nil, profile: String? = nil) {
        self.userID = userID
        self.uploadID = uploadID
        self.target = target
        self.imageID = imageID
        self.thenCutout = thenCutout
        self.profile = profile
    }

    /// The payload's JSON names (`docs/protocol.md`).
    enum CodingKeys: String, CodingKey {
        case userID = "userId", uploadID = "uploadId", target, imageID = "imageId", thenCutout, profile
    }
}

extension NormalizeImagePayload {
    /// The normalisations that make `target` image `imageID` of `userID`, whatever their upload
    /// and profile (every one writes the same photo): what a job reading that photo runs after.
    public static func making(_ target: ImageTarget, _ imageID: StorageID, of userID: StorageID) throws -> JobMatch {
        struct Fields: Encodable {
            let userId: StorageID
            let target: ImageTarget
            let imageId: StorageID
        }
        return try JobMatch(kind: kind, payloadContains: Fields(userId: userID, target: target, imageId: imageID))
    }
}

/// `garment.cutout`'s payload: enqueued after the garment's normalisation, by `garment.process`
/// or by a render request that carries the garment's upload (and, for a normalise payload with
/// `thenCutout`, by the image worker).
public struct GarmentCutoutPayload: JobPayload, Equatable {
    public static let kind: JobKind = "garment.cutout"
    public static let summary = "image worker: remove a garment photo's background (cut-out PNG, preview, foreground fraction)"
    public let userID: StorageID
    public let garmentID: StorageID
    /// When every backend fails: complete with a result saying there is no cut-out
    /// (`CutoutResult.noCutout`) instead of retrying with backoff. Set for a render's input: the
    /// render's 30 s leave no time for backoff, and it proceeds with the normalised photo.
    public let completeWithoutCutout: Bool?

    public init(userID: StorageID, garmentID: StorageID, completeWithoutCutout: Bool? = nil) {
        self.userID = userID
        self.garmentID = garmentID
        self.completeWithoutCutout = completeWithoutCutout
    }

    /// The payload's JSON names (`docs/protocol.md`).
    enum CodingKeys: String, CodingKey {
        case userID = "userId", garmentID = "garmentId", completeWithoutCutout
    }
}

extension GarmentCutoutPayload {
    /// The cut-outs of garment `garmentID` of `userID`: what a job reading the cut-out runs after.
    public static func cuttingOut(_ garmentID: StorageID, of userID: StorageID) throws -> JobMatch {
        struct Fields: Encodable {
            let userId: StorageID
            let garmentId: StorageID
        }
        return try JobMatch(kind: kind, payloadContains: Fields(userId: userID, garmentId: garmentID))
    }
}

/// `account.purge`'s payload.
public struct PurgeAccountPayload: JobPayload, Equatable {
    public static let kind: JobKind = "account.purge"
    public static let summary = "image worker: delete every file of one user (account deletion)"
    public let userID: StorageID

    public init(userID: StorageID) { self.userID = userID }

    /// The payload's JSON names (`docs/protocol.md`).
    enum CodingKeys: String, CodingKey {
        case userID = "userId"
    }
}
