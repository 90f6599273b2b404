/// What an object of the image tree is: the label of the storage metrics
/// (`fleet_storage_written_bytes_total{kind}`…) and the rows of `dispatcher storage usage`.
public enum StorageKind: String, CaseIterable, Sendable, Codable {
    case upload, body, garment, cutout, preview, render
    /// Anything else under the root: the start check's probe, a write's temporary file, a file an
    /// operator put there.
    case other

    /// The kind of the object at `relativePath` (a path below the root, as `StorageKey.relativePath`
    /// lays them out): `.other` for a path that is no key's.
    public init(relativePath: String) {
        self = StorageKey(relativePath: relativePath)?.kind ?? .other
    }
}

extension StorageKey {
    public var kind: StorageKind {
        switch self {
        case .upload: .upload
        case .bodyPhoto: .body
        case .garment: .garment
        case .garmentCutout: .cutout
        case .garmentPreview: .preview
        case .render: .render
        }
    }

    /// The key stored at `relativePath`, the inverse of `relativePath`: how a listing of the tree
    /// (a purge's, `dispatcher storage usage`'s) knows what it found. Nil for a path that is no
    /// key's. A garment id ending in `_cutout` or `_preview` reads as its neighbour's cut-out or
    /// preview: the layout cannot tell them apart, and only the metrics' kind is at stake.
    public init?(relativePath: String) {
        let parts = relativePath.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 3, let user = try? StorageID(String(parts[0])) else { return nil }
        let file = String(parts[2])
        func id(_ suffix: String) -> StorageID? {
            guard file.hasSuffix(suffix) else { return nil }
            return try? StorageID(String(file.dropLast(suffix.count)))
        }
        let key: StorageKey? = switch parts[1] {
        case "uploads": id("").map { .upload(user: user, upload: $0) }
        case "body": id(".jpg").map { .bodyPhoto(user: user, photo: $0) }
        case "renders": id(".jpg").map { .render(user: user, render: $0) }
        case "garments":
            id("_cutout.png").map { .garmentCutout(user: user, garment: $0) }
                ?? id("_preview.jpg").map { .garmentPreview(user: user, garment: $0) }
                ?? id(".jpg").map { .garment(user: user, garment: $0) }
        default: nil
        }
        guard let key, key.relativePath == relativePath else { return nil }
        self = key
    }
}
