import Foundation

/// The fleet's store while its images move from one store to another (`FLEET_STORAGE_FALLBACK`,
/// docs/operations.md, "Moving to object storage"): `primary` is the new store, `fallback` the
/// old one, read-only but for deletions.
///
/// - Reads, sizes and stats look in the new store and, on a miss there, in the old one, so an
///   image not copied yet is served from where it still is.
/// - Writes go to the new store only. A conditional write (`create`) counts an object in the old
///   store as there already, so a render stored before the move is never replaced after it.
/// - Deletions (`delete`, an account purge's `deleteAll`) run in both, the old store first: a
///   copy racing a purge re-checks its source after writing, so either it sees the source gone
///   and removes its copy, or the purge's deletion in the new store comes after the copy and
///   removes it (the runbook's argument).
/// - Listing lists the new store.
public struct FallbackImageStorage: ImageStorage {
    public let primary: any ImageStorage
    public let fallback: any ImageStorage

    public init(primary: any ImageStorage, fallback: any ImageStorage) {
        self.primary = primary
        self.fallback = fallback
    }

    public func size(of key: StorageKey) async throws -> Int {
        do {
            return try await primary.size(of: key)
        } catch StorageError.notFound {
            return try await fallback.size(of: key)
        }
    }

    public func info(of key: StorageKey) async throws -> StoredObject {
        do {
            return try await primary.info(of: key)
        } catch StorageError.notFound {
            return try await fallback.info(of: key)
        }
    }

    public func read(_ key: StorageKey, maxBytes: Int) async throws -> Data {
        do {
            return try await primary.read(key, maxBytes: maxBytes)
        } catch StorageError.notFound {
            return try await fallback.read(key, maxBytes: maxBytes)
        }
    }

    public func withFileForReading<T>(_ key: StorageKey, maxBytes: Int, _ body: (String) async throws -> T) async throws -> T {
        // Only a miss before `body` runs is the new store's: a `notFound` that `body` itself throws
        // is its caller's, and `body` runs once.
        var ran = false
        do {
            return try await primary.withFileForReading(key, maxBytes: maxBytes) { path in
                ran = true
                return try await body(path)
            }
        } catch StorageError.notFound where !ran {
            return try await fallback.withFileForReading(key, maxBytes: maxBytes, body)
        }
    }

    public func write(_ data: Data, to key: StorageKey) async throws {
        try await primary.write(data, to: key)
    }

    public func create(_ data: Data, at key: StorageKey) async throws {
        guard try await !fallback.holds(key) else { throw StorageError.alreadyExists(key.relativePath) }
        try await primary.create(data, at: key)
    }

    public func delete(_ key: StorageKey) async throws {
        try await fallback.delete(key)
        try await primary.delete(key)
    }

    /// The objects deleted in both stores together (one not copied yet counts once, one copied
    /// counts in each).
    public func deleteAll(of user: StorageID) async throws -> Int {
        let old = try await fallback.deleteAll(of: user)
        return old + (try await primary.deleteAll(of: user))
    }

    public func list(after: String?, limit: Int) async throws -> StoragePage {
        try await primary.list(after: after, limit: limit)
    }

    /// Both stores: the new one takes writes, the old one deletions.
    public func checkAccess() async throws {
        try await primary.checkAccess()
        try await fallback.checkAccess()
    }
}
