/// A store listed whole, a page at a time: what `dispatcher storage usage` counts. Both stores
/// conform (`FileImageStorage` walks its folder, `S3ImageStorage` lists its prefix).
public protocol StorageInventory: Sendable {
    /// Calls `page` with every object under the store's root, a page (at most about 1,000) at a
    /// time, paths relative to the root.
    func listAll(_ page: ([StoredObject]) async throws -> Void) async throws
}

extension StorageInventory {
    /// Objects and bytes per kind, and their owners, over one listing; `progress` hears the tally
    /// after each page.
    public func tally(progress: (StorageTally) -> Void = { _ in }) async throws -> StorageTally {
        var tally = StorageTally()
        try await listAll { page in
            tally.add(page)
            progress(tally)
        }
        return tally
    }
}
