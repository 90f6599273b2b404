import FleetSupport

/// Why an upload was refused. Each carries the product's error code; none is retried.
public enum ImageError: CodedError, CustomStringConvertible, Sendable, Equatable {
    /// Bigger than the configured byte or pixel limits (decompression bombs included).
    case tooLarge(String)
    /// Empty, truncated, corrupt, or not an image at all.
    case invalid(String)
    /// An image, but not JPEG, PNG, WebP or HEIC.
    case unsupported(String)

    public var code: String {
        switch self {
        case .tooLarge: "IMAGE_TOO_LARGE"
        case .invalid: "IMAGE_INVALID"
        case .unsupported: "IMAGE_UNSUPPORTED"
        }
    }

    public var description: String {
        switch self {
        case .tooLarge(let reason), .invalid(let reason), .unsupported(let reason): "\(code): \(reason)"
        }
    }
}
