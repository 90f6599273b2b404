/// Objects and bytes per kind, and who owns them: what a purge deleted (for the deleted counters)
/// or what a whole listing found (`dispatcher storage usage`).
public struct StorageTally: Sendable, Equatable {
    public struct Amount: Sendable, Equatable, Codable {
        public var objects = 0
        public var bytes = 0

        public init(objects: Int = 0, bytes: Int = 0) {
            self.objects = objects
            self.bytes = bytes
        }
    }

    public private(set) var byKind: [StorageKind: Amount] = [:]
    /// The first folders of the fleet's objects: users, and onboarding tokens' trees.
    public private(set) var owners: Set<String> = []

    public init() {}

    /// The fleet's images, every kind but `other`.
    public var total: Amount {
        byKind.filter { $0.key != .other }.values.reduce(into: Amount()) { total, amount in
            total.objects += amount.objects
            total.bytes += amount.bytes
        }
    }

    public mutating func add(_ object: StoredObject) {
        count(object.key.kind, bytes: object.size)
        owners.insert(object.key.user.value)
    }

    /// An object at `path` below the root: a fleet key's, or `other`.
    public mutating func add(path: String, size: Int) {
        if let key = StorageKey(relativePath: path) {
            add(StoredObject(key: key, size: size, md5: nil))
        } else {
            count(.other, bytes: size)
        }
    }

    /// A listing's page: its objects, and its paths that are no key as `other` (a listing gives
    /// no size for those: their bytes are not counted).
    public mutating func add(_ page: StoragePage) {
        for object in page.objects { add(object) }
        for _ in page.foreign { count(.other, bytes: 0) }
    }

    private mutating func count(_ kind: StorageKind, bytes: Int) {
        byKind[kind, default: Amount()].objects += 1
        byKind[kind, default: Amount()].bytes += bytes
    }
}

extension ImageStorage {
    /// Objects and bytes per kind, and their owners, over one listing of the whole store, a page
    /// of 1,000 at a time; `progress` hears the tally after each page.
    public func tally(progress: (StorageTally) -> Void = { _ in }) async throws -> StorageTally {
        var tally = StorageTally()
        var cursor: String?
        repeat {
            let page = try await list(after: cursor, limit: 1000)
            tally.add(page)
            progress(tally)
            cursor = page.next
        } while cursor != nil
        return tally
    }
}
