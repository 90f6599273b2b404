import FleetSupport
import Foundation

/// The image tree behind a small seam: the filesystem now, object storage later as another
/// conformer, not a rewrite.
public protocol ImageStorage: Sendable {
    /// A local file holding the object's bytes, for libvips to read (object storage would
    /// download a copy). Throws `StorageError.notFound`.
    func fileForReading(_ key: StorageKey) async throws -> String
    /// Stores `data` at `key`, replacing any previous object only once it is complete.
    func write(_ data: Data, to key: StorageKey) async throws
    /// Deletes one object; deleting a missing object is not an error.
    func delete(_ key: StorageKey) async throws
    /// Deletes every file of `user`; returns how many.
    func deleteAll(of user: StorageID) async throws -> Int
}

/// `ImageStorage` on a local folder (`FLEET_STORAGE_ROOT`, production `/data/images`).
public struct FileImageStorage: ImageStorage {
    public let root: String

    public init(root: String) { self.root = root }

    public func path(of key: StorageKey) -> String { "\(root)/\(key.relativePath)" }

    public func fileForReading(_ key: StorageKey) async throws -> String {
        let path = path(of: key)
        guard FileManager.default.fileExists(atPath: path) else { throw StorageError.notFound(key.relativePath) }
        return path
    }

    public func write(_ data: Data, to key: StorageKey) async throws {
        // Two fsyncs: off the cooperative threads, which the process's other tasks need.
        let path = path(of: key)
        try await offload(on: blockingIO) { try AtomicFile.write(data, to: path) }
    }

    public func delete(_ key: StorageKey) async throws {
        do {
            try FileManager.default.removeItem(atPath: path(of: key))
        } catch CocoaError.fileNoSuchFile {
            return
        }
    }

    public func deleteAll(of user: StorageID) async throws -> Int {
        let folder = "\(root)/\(user)"
        guard isDirectory(folder), let files = FileManager.default.enumerator(atPath: folder)?.allObjects as? [String] else { return 0 }
        let count = files.filter { !isDirectory("\(folder)/\($0)") }.count
        try FileManager.default.removeItem(atPath: folder)
        return count
    }

    private func isDirectory(_ path: String) -> Bool {
        var directory: ObjCBool = false
        return FileManager.default.fileExists(atPath: path, isDirectory: &directory) && directory.boolValue
    }
}
