import FleetStorage
import FleetSupport
import Foundation

/// `ImageStorage` in a bucket of an S3-compatible store (AWS S3, R2, GCS's XML API, MinIO, Ceph
/// RGW), every key under the settings' prefix (`prefix/userId/...`). One PUT per object, so an
/// object is whole or absent; a read is one GET bounded by the caller's `maxBytes`, refused on
/// its Content-Length before the body when over it; a user's tree is deleted by listing its
/// prefix a page at a time and deleting each page in one DeleteObjects. Counts what it writes
/// and deletes (`StorageMetrics`): the sizes of a purge's objects come with its listing.
///
/// Failures map onto the storage codes every store shares: the store unreachable after the
/// client's retries (5xx, resets, timeouts) is `STORAGE_UNAVAILABLE`, refused keys or a missing
/// bucket `STORAGE_DENIED` (`StorageFailure`, which the handlers defer without spending the job's
/// attempt); a missing object is `StorageError.notFound`.
public struct S3ImageStorage: ImageStorage {
    public let client: S3Client
    public let prefix: String
    /// Where the temporary copies for libvips go.
    let temporaryFolder: String

    public init(client: S3Client, prefix: String, temporaryFolder: String = NSTemporaryDirectory()) {
        self.client = client
        self.prefix = prefix.isEmpty || prefix.hasSuffix("/") ? prefix : prefix + "/"
        self.temporaryFolder = temporaryFolder
    }

    /// The object key of a storage key.
    public func objectKey(_ key: StorageKey) -> String { prefix + key.relativePath }

    public func size(of key: StorageKey) async throws -> Int {
        do {
            return try await client.head(key: objectKey(key)).size
        } catch {
            throw mapped(error, key: key, reading: true)
        }
    }

    public func info(of key: StorageKey) async throws -> StoredObject {
        do {
            let info = try await client.head(key: objectKey(key))
            return StoredObject(key: key, size: info.size, md5: info.md5)
        } catch {
            throw mapped(error, key: key, reading: true)
        }
    }

    /// ListObjectsV2 under the prefix from `start-after`: the cursor is the last relative path
    /// listed, so no continuation token has to be kept between pages. The start check's probes
    /// (`.fleet-probe/`) are no objects of the fleet.
    public func list(after: String?, limit: Int) async throws -> StoragePage {
        let page: S3ListPage
        do {
            page = try await client.list(prefix: prefix, startAfter: after.map { prefix + $0 }, maxKeys: min(limit, 1000))
        } catch {
            throw failure(error, path: prefix.isEmpty ? "the bucket" : prefix, reading: true)
        }
        let entries = page.objects.map { (path: String($0.key.dropFirst(prefix.count)), size: $0.size, md5: S3ObjectInfo.md5(ofETag: $0.etag)) }
        return StoragePage(
            listing: entries.filter { !$0.path.hasPrefix(".fleet-probe/") },
            next: page.continuationToken == nil ? nil : entries.last?.path)
    }

    public func read(_ key: StorageKey, maxBytes: Int) async throws -> Data {
        do {
            // One GET, no HEAD before it: the answer's Content-Length is the size, and the client
            // refuses an object over the bound on that header, before any byte of its body is read.
            return try await client.get(key: objectKey(key), maxBytes: maxBytes)
        } catch where error.kind == .tooLarge {
            // Rare (an upload over the limit): the size is asked only to say it.
            let size = try await size(of: key)
            throw StorageError.tooLarge(key.relativePath, bytes: max(size, maxBytes + 1), limit: maxBytes)
        } catch {
            throw mapped(error, key: key, reading: true)
        }
    }

    public func withFileForReading<T>(_ key: StorageKey, maxBytes: Int, _ body: (String) async throws -> T) async throws -> T {
        let bytes = try await read(key, maxBytes: maxBytes)
        let path = "\(temporaryFolder)/fleet-\(UUID().uuidString)"
        do {
            _ = try await offload(on: blockingIO) { try AtomicFile.write(bytes, to: path) }
        } catch let failure as StorageFailure {
            throw StorageFailure(path: "a temporary copy in \(temporaryFolder)", reason: failure.reason, code: failure.code, reading: true)
        }
        defer { unlink(path) }
        return try await body(path)
    }

    public func write(_ data: Data, to key: StorageKey) async throws {
        do {
            try await client.put(key: objectKey(key), body: data, contentType: Self.contentType(of: key))
        } catch {
            throw mapped(error, key: key, reading: false)
        }
        StorageMetrics.wrote(key, bytes: data.count)
    }

    public func create(_ data: Data, at key: StorageKey) async throws {
        do {
            try await client.put(key: objectKey(key), body: data, contentType: Self.contentType(of: key), ifAbsent: true)
        } catch where error.kind == .alreadyExists {
            throw StorageError.alreadyExists(key.relativePath)
        } catch {
            throw mapped(error, key: key, reading: false)
        }
        StorageMetrics.wrote(key, bytes: data.count)
    }

    /// A HEAD first, for the size the deleted counters need (a DELETE answers none): an object
    /// already gone needs no DELETE.
    public func delete(_ key: StorageKey) async throws {
        do {
            let size = try await client.head(key: objectKey(key)).size
            try await client.delete(key: objectKey(key))
            StorageMetrics.deleted(key, bytes: size)
        } catch where error.kind == .notFound {
            return
        } catch {
            throw mapped(error, key: key, reading: false)
        }
    }

    /// Lists `prefix/user/` a page (1,000 keys) at a time and deletes each page in one request.
    /// Each page is listed anew from the start: the keys of the page before are gone, so an
    /// attempt killed half way leaves its retry only what remains.
    public func deleteAll(of user: StorageID) async throws -> Int {
        let userPrefix = "\(prefix)\(user)/"
        var deleted = 0
        do {
            while true {
                let page = try await client.list(prefix: userPrefix, maxKeys: S3Client.deleteBatchLimit)
                guard !page.objects.isEmpty else { return deleted }
                try await client.delete(keys: page.keys)
                StorageMetrics.deleted(tally(page))
                deleted += page.objects.count
            }
        } catch {
            throw failure(error, path: userPrefix, reading: false)
        }
    }

    /// The page's objects per kind, with the sizes the listing gave.
    private func tally(_ page: S3ListPage) -> StorageTally {
        var tally = StorageTally()
        for object in page.objects { tally.add(path: String(object.key.dropFirst(prefix.count)), size: object.size) }
        return tally
    }

    public func checkAccess() async throws {
        let probe = "\(prefix).fleet-probe/\(UUID().uuidString)"
        do {
            // A PUT, not a HEAD of the bucket: a HEAD's refusal has no body to say which it is.
            try await client.put(key: probe, body: Data("probe".utf8), contentType: "text/plain")
            try await client.delete(key: probe)
        } catch {
            throw Self.configurationError(error, bucket: client.endpoint.bucket, prefix: prefix)
        }
    }

    /// The one variable an operator fixes for a failed check, and why.
    static func configurationError(_ error: S3Error, bucket: String, prefix: String) -> ConfigurationError {
        let variable: String = switch (error.kind, error.code) {
        case (.noSuchBucket, _): "FLEET_STORAGE"
        case (_, "InvalidAccessKeyId"): "AWS_ACCESS_KEY_ID"
        case (_, "SignatureDoesNotMatch"): "AWS_SECRET_ACCESS_KEY"
        case (_, "ExpiredToken"), (_, "InvalidToken"), (_, "TokenRefreshRequired"): "AWS_SESSION_TOKEN"
        case (_, "AuthorizationHeaderMalformed"): "AWS_REGION"
        case (.unavailable, _): "AWS_ENDPOINT_URL_S3"
        default: "FLEET_STORAGE"
        }
        let place = "bucket \(bucket)\(prefix.isEmpty ? "" : " prefix \(prefix)")"
        return ConfigurationError(variable: variable, reason: "cannot write in \(place): \(error)")
    }

    private func mapped(_ error: S3Error, key: StorageKey, reading: Bool) -> any Error {
        if error.kind == .notFound { return StorageError.notFound(key.relativePath) }
        return failure(error, path: key.relativePath, reading: reading)
    }

    private func failure(_ error: any Error, path: String, reading: Bool) -> any Error {
        guard let error = error as? S3Error else { return error }
        let code: StorageFailureCode? = switch error.kind {
        case .unavailable: .unavailable
        case .denied, .noSuchBucket: .denied
        case .notFound, .alreadyExists, .tooLarge, .refused: nil
        }
        return StorageFailure(path: path, reason: error.description, code: code, reading: reading)
    }

    /// What a browser is told the object is, when it GETs it by a presigned URL.
    static func contentType(of key: StorageKey) -> String {
        switch key {
        case .garmentCutout: "image/png"
        case .upload: "application/octet-stream"
        case .bodyPhoto, .garment, .garmentPreview, .render: "image/jpeg"
        }
    }
}
