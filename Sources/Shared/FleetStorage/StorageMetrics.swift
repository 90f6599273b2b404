import Metrics

/// The image store's growth, counted by the stores themselves where the sizes are known (a
/// write's bytes, a deleted object's size, a purge's listing): written and deleted objects and
/// bytes per `StorageKind`. Written minus deleted is what the tree grew by (a replaced object
/// counts as written again, its old bytes not as deleted). Labelled by kind only: never a key, a
/// user or the bucket.
public enum StorageMetrics {
    public static func wrote(_ key: StorageKey, bytes: Int) {
        let kind = [("kind", key.kind.rawValue)]
        Counter(label: "fleet_storage_written_objects_total", dimensions: kind).increment()
        Counter(label: "fleet_storage_written_bytes_total", dimensions: kind).increment(by: bytes)
    }

    public static func deleted(_ key: StorageKey, bytes: Int) {
        deleted(key.kind, StorageTally.Amount(objects: 1, bytes: bytes))
    }

    public static func deleted(_ tally: StorageTally) {
        for (kind, amount) in tally.byKind { deleted(kind, amount) }
    }

    private static func deleted(_ kind: StorageKind, _ amount: StorageTally.Amount) {
        let kind = [("kind", kind.rawValue)]
        Counter(label: "fleet_storage_deleted_objects_total", dimensions: kind).increment(by: amount.objects)
        Counter(label: "fleet_storage_deleted_bytes_total", dimensions: kind).increment(by: amount.bytes)
    }
}
