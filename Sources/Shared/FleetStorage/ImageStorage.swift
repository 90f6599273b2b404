import FleetSupport
import Foundation

/// The image tree behind a small seam: the filesystem (`FileImageStorage`) and S3-compatible
/// object storage (`S3ImageStorage`, in FleetObjectStore) conform to it. Reads fail with
/// `StorageError.notFound` or `.tooLarge` when the object is the problem, with `StorageFailure`
/// (its `code`) when the store is.
public protocol ImageStorage: Sendable {
    /// The object's size in bytes, known before any of its bytes are read (imagor's `Stat`), so an
    /// upload over a limit is refused without being fetched.
    func size(of key: StorageKey) async throws -> Int
    /// The object's bytes; `StorageError.tooLarge` when there are more than `maxBytes`.
    func read(_ key: StorageKey, maxBytes: Int) async throws -> Data
    /// Runs `body` with a local file holding the object's bytes, for libvips to read: the file
    /// itself in a file tree, a temporary copy of at most `maxBytes` bytes (removed when `body`
    /// returns) in object storage.
    func withFileForReading<T>(_ key: StorageKey, maxBytes: Int, _ body: (String) async throws -> T) async throws -> T
    /// Stores `data` at `key`, replacing any previous object only once it is complete.
    func write(_ data: Data, to key: StorageKey) async throws
    /// Stores `data` at `key` unless an object is there already: then nothing changes and it
    /// throws `StorageError.alreadyExists` (`docs/images.md`, "Writes").
    func create(_ data: Data, at key: StorageKey) async throws
    /// Deletes one object; deleting a missing object is not an error.
    func delete(_ key: StorageKey) async throws
    /// Deletes every object of `user`; returns how many.
    func deleteAll(of user: StorageID) async throws -> Int
    /// The object's size and, when the store keeps it, its MD5 (`StoredObject.md5`), without its
    /// bytes; `StorageError.notFound` when there is none.
    func info(of key: StorageKey) async throws -> StoredObject
    /// One page of the store's objects, at most `limit` of them, those after the cursor `after`
    /// (the `next` of the page before; nil: from the first), in the store's own stable order.
    /// Objects written or deleted while the pages are read may or may not be in them.
    func list(after: String?, limit: Int) async throws -> StoragePage
    /// What a process checks at start: the store reachable, and a small object written where the
    /// fleet writes, then deleted. Throws a `ConfigurationError` naming the variable to fix.
    func checkAccess() async throws
}

extension ImageStorage {
    /// Whether an object is stored at `key`.
    public func holds(_ key: StorageKey) async throws -> Bool {
        do {
            _ = try await size(of: key)
            return true
        } catch StorageError.notFound {
            return false
        }
    }
}

/// `ImageStorage` on a local folder (`FLEET_STORAGE_ROOT`, production `/data/images`). Counts
/// what it writes and deletes (`StorageMetrics`).
public struct FileImageStorage: ImageStorage {
    public let root: String

    public init(root: String) { self.root = root }

    public func path(of key: StorageKey) -> String { "\(root)/\(key.relativePath)" }

    public func size(of key: StorageKey) async throws -> Int {
        let path = path(of: key)
        var info = stat()
        guard stat(path, &info) == 0 else {
            if errno == ENOENT || errno == ENOTDIR { throw StorageError.notFound(key.relativePath) }
            throw StorageFailure(path: path, errno: errno, reading: true)
        }
        return Int(info.st_size)
    }

    public func info(of key: StorageKey) async throws -> StoredObject {
        StoredObject(key: key, size: try await size(of: key), md5: nil)
    }

    public func list(after: String?, limit: Int) async throws -> StoragePage {
        let walk = FileTreeWalk(root: root)
        let entries = try await offload(on: blockingIO) { try walk.page(after: after, limit: limit) }
        return StoragePage(listing: entries, next: entries.count < limit ? nil : entries.last?.path)
    }

    public func read(_ key: StorageKey, maxBytes: Int) async throws -> Data {
        let size = try await size(of: key)
        guard size <= maxBytes else { throw StorageError.tooLarge(key.relativePath, bytes: size, limit: maxBytes) }
        do {
            return try Data(contentsOf: URL(fileURLWithPath: path(of: key)))
        } catch CocoaError.fileReadNoSuchFile {
            throw StorageError.notFound(key.relativePath)
        }
    }

    public func withFileForReading<T>(_ key: StorageKey, maxBytes: Int, _ body: (String) async throws -> T) async throws -> T {
        let size = try await size(of: key)
        guard size <= maxBytes else { throw StorageError.tooLarge(key.relativePath, bytes: size, limit: maxBytes) }
        return try await body(path(of: key))
    }

    public func write(_ data: Data, to key: StorageKey) async throws {
        // Two fsyncs: off the cooperative threads, which the process's other tasks need.
        let path = path(of: key)
        _ = try await offload(on: blockingIO) { try AtomicFile.write(data, to: path) }
        StorageMetrics.wrote(key, bytes: data.count)
    }

    public func create(_ data: Data, at key: StorageKey) async throws {
        let path = path(of: key)
        let stored = try await offload(on: blockingIO) { try AtomicFile.write(data, to: path, replacing: false) }
        guard stored else { throw StorageError.alreadyExists(key.relativePath) }
        StorageMetrics.wrote(key, bytes: data.count)
    }

    public func delete(_ key: StorageKey) async throws {
        let size = try? await self.size(of: key)
        do {
            try FileManager.default.removeItem(atPath: path(of: key))
        } catch CocoaError.fileNoSuchFile {
            return
        }
        if let size { StorageMetrics.deleted(key, bytes: size) }
    }

    /// Walks the user's folder for the sizes the deleted counters need, then removes it whole.
    public func deleteAll(of user: StorageID) async throws -> Int {
        guard isDirectory("\(root)/\(user)") else { return 0 }
        let walk = FileTreeWalk(root: "\(root)/\(user)")
        let files = try await offload(on: blockingIO) { try walk.page(after: nil, limit: .max) }
        try FileManager.default.removeItem(atPath: "\(root)/\(user)")
        var deleted = StorageTally()
        for file in files { deleted.add(path: "\(user)/\(file.path)", size: file.size) }
        StorageMetrics.deleted(deleted)
        return files.count
    }

    public func checkAccess() async throws {
        let probe = "\(root)/.fleet-probe-\(UUID().uuidString)"
        do {
            _ = try await offload(on: blockingIO) { try AtomicFile.write(Data("probe".utf8), to: probe) }
        } catch let failure as StorageFailure {
            throw ConfigurationError(variable: "FLEET_STORAGE_ROOT", reason: "cannot write in \(root): \(failure.reason)")
        }
        unlink(probe)
    }

    private func isDirectory(_ path: String) -> Bool {
        var directory: ObjCBool = false
        return FileManager.default.fileExists(atPath: path, isDirectory: &directory) && directory.boolValue
    }
}
