import FleetStorage

/// What an image is normalised into.
public enum ImageTarget: String, Codable, Sendable {
    case body, garment
}

/// `image.normalize`'s payload: written by the dispatcher, read by the image worker.
public struct NormalizeImagePayload: Codable, Sendable, Equatable {
    public let userId: StorageID
    public let uploadId: StorageID
    public let target: ImageTarget
    /// The body photo's or the garment's id.
    public let imageId: StorageID
    /// Garments only (`garment.process` sets it): once normalised, the image worker enqueues a
    /// `garment.cutout` job to remove the background.
    public let thenCutout: Bool?

    public init(userId: StorageID, uploadId: StorageID, target: ImageTarget, imageId: StorageID, thenCutout: Bool? = nil) {
        self.userId = userId
        self.uploadId = uploadId
        self.target = target
        self.imageId = imageId
        self.thenCutout = thenCutout
    }
}

/// `account.purge`'s payload.
public struct PurgeAccountPayload: Codable, Sendable, Equatable {
    public let userId: StorageID

    public init(userId: StorageID) { self.userId = userId }
}
