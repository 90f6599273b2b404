/// What an object of the image tree is: the label of the storage metrics
/// (`fleet_storage_written_bytes_total{kind}`…) and the rows of `dispatcher storage usage`.
public enum StorageKind: String, CaseIterable, Sendable, Codable {
    case upload, body, garment, cutout, preview, render
    /// A path under the root that is no fleet key (a file put there by hand, say).
    case other
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
}
