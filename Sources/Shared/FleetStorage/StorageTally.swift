/// Objects and bytes per kind, and who owns them: what a purge deleted (for the deleted counters)
/// or what a whole listing found (`dispatcher storage usage`). Built from listings, whose paths
/// are relative to the store's root.
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
    /// The first folders of the objects of a known kind: users, and onboarding tokens' trees.
    public private(set) var owners: Set<String> = []

    public init() {}

    public var total: Amount {
        byKind.values.reduce(into: Amount()) { total, amount in
            total.objects += amount.objects
            total.bytes += amount.bytes
        }
    }

    public mutating func add(_ object: StoredObject) {
        let key = StorageKey(relativePath: object.relativePath)
        byKind[key?.kind ?? .other, default: Amount()].objects += 1
        byKind[key?.kind ?? .other, default: Amount()].bytes += object.size
        if let key { owners.insert(key.user.value) }
    }

    public mutating func add(_ objects: some Sequence<StoredObject>) {
        for object in objects { add(object) }
    }
}

/// One object a listing found: its path below the store's root and its size.
public struct StoredObject: Sendable, Equatable {
    public let relativePath: String
    public let size: Int

    public init(relativePath: String, size: Int) {
        self.relativePath = relativePath
        self.size = size
    }
}
