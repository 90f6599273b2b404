import DispatcherProtocol
import FleetStorage
import Foundation

/// Where clients move an image's bytes themselves: presigned URLs of the image store, so the
/// bytes never pass through the backend or the dispatcher's socket. The dispatcher only signs;
/// it never reads the object. One conformer per kind of store (`imageURLs(for:)`).
public protocol ImageURLs: Sendable {
    /// A PUT of exactly `contentLength` bytes of `contentType` to `key`, good for `seconds` after
    /// `date`, that creates the object and never replaces one: an upload the image worker may
    /// already have normalised cannot change under its photo.
    func put(_ key: StorageKey, contentLength: Int, contentType: String, seconds: Int, at date: Date) throws -> PresignedURLView
    /// A GET of `key`, good for `seconds` after `date`.
    func get(_ key: StorageKey, seconds: Int, at date: Date) throws -> PresignedURLView
}

/// The image store has no URLs to give: files are served by whoever mounts the tree.
public struct ImageURLsUnavailable: Error, Sendable, Equatable {
    public static let message = "presigned URLs need FLEET_STORAGE=s3://bucket/prefix; this dispatcher's images are files"
}

/// The conformer for where the fleet keeps its images.
public func imageURLs(for location: StorageLocation) -> any ImageURLs {
    switch location {
    case .files: FileImageURLs()
    case .s3(let settings): S3ImageURLs(settings: settings)
    }
}

/// Files: every URL is refused `STORAGE_NOT_PRESIGNABLE`, and renders carry no `resultUrl`.
struct FileImageURLs: ImageURLs {
    func put(_ key: StorageKey, contentLength: Int, contentType: String, seconds: Int, at date: Date) throws -> PresignedURLView {
        throw ImageURLsUnavailable()
    }

    func get(_ key: StorageKey, seconds: Int, at date: Date) throws -> PresignedURLView {
        throw ImageURLsUnavailable()
    }
}

/// A bucket: SigV4 query-signed URLs (`S3Presigner`) for the key's object below the fleet's prefix.
struct S3ImageURLs: ImageURLs {
    let settings: S3StoreSettings
    let presigner: S3Presigner

    init(settings: S3StoreSettings) {
        self.settings = settings
        presigner = S3Presigner(endpoint: settings.endpoint, credentials: settings.credentials)
    }

    func put(_ key: StorageKey, contentLength: Int, contentType: String, seconds: Int, at date: Date) throws -> PresignedURLView {
        let url = try presigner.put(
            key: settings.objectKey(key.relativePath), contentLength: contentLength, contentType: contentType, onlyIfAbsent: true,
            lifetime: .seconds(seconds), at: date)
        return PresignedURLView(
            method: "PUT", url: url, headers: ["Content-Type": contentType, "Content-Length": String(contentLength), "If-None-Match": "*"],
            expiresAt: Self.expiry(of: date, seconds: seconds))
    }

    func get(_ key: StorageKey, seconds: Int, at date: Date) throws -> PresignedURLView {
        let url = try presigner.get(key: settings.objectKey(key.relativePath), lifetime: .seconds(seconds), at: date)
        return PresignedURLView(method: "GET", url: url, headers: [:], expiresAt: Self.expiry(of: date, seconds: seconds))
    }

    /// The signature's `X-Amz-Date` is in whole seconds, and the store counts the lifetime from it.
    private static func expiry(of date: Date, seconds: Int) -> Date {
        Date(timeIntervalSince1970: date.timeIntervalSince1970.rounded(.down) + Double(seconds))
    }
}

/// `expiresInSeconds` checked: default 300, 1 to 900 (`BAD_ARGUMENT` outside).
func presignLifetime(_ seconds: Int?) throws -> Int {
    let seconds = seconds ?? PresignedURLLifetime.defaultSeconds
    let allowed = PresignedURLLifetime.allowedSeconds
    guard allowed.contains(seconds) else {
        throw DispatcherError(.badArgument, "args.expiresInSeconds must be \(allowed.lowerBound) to \(allowed.upperBound) (15 minutes at most)")
    }
    return seconds
}
