import FleetStorage
import Foundation

/// An image store that forwards every call to `base`, for tests that watch or disturb one of
/// them: `beforeRead` runs before each `read` (found or not), `afterRead` after each `read`
/// returned its bytes.
struct ObservedImageStorage: ImageStorage {
    let base: any ImageStorage
    var beforeRead: @Sendable (StorageKey) async throws -> Void = { _ in }
    var afterRead: @Sendable (StorageKey) async throws -> Void = { _ in }

    func size(of key: StorageKey) async throws -> Int { try await base.size(of: key) }

    func read(_ key: StorageKey, maxBytes: Int) async throws -> Data {
        try await beforeRead(key)
        let data = try await base.read(key, maxBytes: maxBytes)
        try await afterRead(key)
        return data
    }

    func info(of key: StorageKey) async throws -> StoredObject { try await base.info(of: key) }
    func list(after: String?, limit: Int) async throws -> StoragePage { try await base.list(after: after, limit: limit) }
    func withFileForReading<T>(_ key: StorageKey, maxBytes: Int, _ body: (String) async throws -> T) async throws -> T {
        try await base.withFileForReading(key, maxBytes: maxBytes, body)
    }
    func write(_ data: Data, to key: StorageKey) async throws { try await base.write(data, to: key) }
    func create(_ data: Data, at key: StorageKey) async throws { try await base.create(data, at: key) }
    func delete(_ key: StorageKey) async throws { try await base.delete(key) }
    func deleteAll(of user: StorageID) async throws -> Int { try await base.deleteAll(of: user) }
    func checkAccess() async throws { try await base.checkAccess() }
}
