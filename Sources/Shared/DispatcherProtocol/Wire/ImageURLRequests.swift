import Foundation

/// A presigned URL of the image store: whoever holds it may do `method` on one object, without
/// keys, until `expiresAt`. It is a bearer credential: hand it to the one client it is for, never
/// log it.
public struct PresignedURLView: Codable, Sendable, Equatable {
    /// `PUT` or `GET`.
    public let method: String
    public let url: String
    /// The headers the request must carry exactly as given (a PUT's signed `Content-Type` and
    /// `Content-Length`); empty for a GET.
    public let headers: [String: String]
    public let expiresAt: Date

    public init(method: String, url: String, headers: [String: String], expiresAt: Date) {
        self.method = method
        self.url = url
        self.headers = headers
        self.expiresAt = expiresAt
    }
}

extension PresignedURLView: CustomStringConvertible {
    /// The URL without its query, where the signature and the credential are: what logs may show.
    public var description: String {
        "\(method) \(url.prefix { $0 != "?" }) (signature withheld) until \(expiresAt.formatted(.iso8601))"
    }
}

/// The lifetimes of presigned URLs, in seconds (`expiresInSeconds`).
public enum PresignedURLLifetime {
    public static let defaultSeconds = 300
    /// 15 minutes at most: a URL cannot be revoked once handed out.
    public static let allowedSeconds = 1...900
}

/// `upload.presign`: a PUT URL for `{owner}/uploads/{uploadId}` in the bucket, so the app (or the
/// backend) stores an upload's bytes straight in the store; `render.request` or `image.normalize`
/// then name the upload by id as for any upload.
public struct UploadPresignRequest: DispatcherRequest {
    public static let op = "upload.presign"
    /// The content types an upload may have: those the image worker normalises.
    public enum ContentType: String, Codable, Sendable, WireEnum, CaseIterable {
        case jpeg = "image/jpeg", png = "image/png", webp = "image/webp", heic = "image/heic"
    }
    public struct Result: Codable, Sendable, Equatable {
        public let uploadId: String
        /// The storage tree the upload lands in: `userId`, or the onboarding token's `tokenId`.
        public let ownerId: String
        public let method: String
        public let url: String
        /// Send exactly these: the store refuses another type or length.
        public let headers: [String: String]
        public let expiresAt: Date

        public init(uploadId: String, ownerId: String, url: PresignedURLView) {
            self.uploadId = uploadId
            self.ownerId = ownerId
            method = url.method
            self.url = url.url
            headers = url.headers
            expiresAt = url.expiresAt
        }
    }

    /// Exactly one of `userId` and `ephemeralToken` (a live onboarding token: its tree is its `tokenId`).
    public let userId: String?
    public let ephemeralToken: String?
    /// The caller's id for the upload, as `image.normalize` and `render.request` take it; omitted,
    /// the dispatcher picks one (`up-` and 24 random hex digits).
    public let uploadId: String?
    public let contentType: ContentType
    /// The upload's exact size in bytes, 1 to the image worker's limit (60 MiB; above it `IMAGE_TOO_LARGE`).
    public let contentLength: Int
    /// Default 300; 1 to 900.
    public let expiresInSeconds: Int?

    public init(
        userId: String? = nil, ephemeralToken: String? = nil, uploadId: String? = nil, contentType: ContentType, contentLength: Int,
        expiresInSeconds: Int? = nil
    ) {
        self.userId = userId
        self.ephemeralToken = ephemeralToken
        self.uploadId = uploadId
        self.contentType = contentType
        self.contentLength = contentLength
        self.expiresInSeconds = expiresInSeconds
    }
}

/// `image.url`: a GET URL for one of a user's images, for the backend's auth-gated image
/// endpoint to redirect to instead of passing the bytes through.
public struct ImageURLRequest: DispatcherRequest {
    public static let op = "image.url"
    public typealias Result = PresignedURLView
    /// Which image: the key is built from the ids, never from a path.
    public enum Kind: String, Codable, Sendable, WireEnum, CaseIterable {
        case body, garment, cutout, preview, render
    }
    /// The image's owner: the storage tree for `body`, `garment`, `cutout` and `preview` (a user's
    /// id, or an onboarding token's `tokenId`); for `render`, the render's user (or the tree it was
    /// made in), else `NOT_FOUND`.
    public let userId: String
    public let kind: Kind
    /// The body photo's, the garment's or the render's id.
    public let id: String
    /// Default 300; 1 to 900.
    public let expiresInSeconds: Int?

    public init(userId: String, kind: Kind, id: String, expiresInSeconds: Int? = nil) {
        self.userId = userId
        self.kind = kind
        self.id = id
        self.expiresInSeconds = expiresInSeconds
    }
}
