import FleetQueue
import FleetSupport

/// Why an upload was refused. Each carries the product's error code; none is retried.
public enum ImageError: CodedError, CustomStringConvertible, Sendable, Equatable {
    /// Bigger than the configured byte or pixel limits (decompression bombs included).
    case tooLarge(String)
    /// Empty, truncated, corrupt, or not an image at all.
    case invalid(String)
    /// An image, but not JPEG, PNG, WebP or HEIC.
    case unsupported(String)

    public var code: JobErrorCode {
        switch self {
        case .tooLarge: .imageTooLarge
        case .invalid: .imageInvalid
        case .unsupported: .imageUnsupported
        }
    }

    /// What is wrong, without the code: a job's error keeps its code beside it.
    public var reason: String {
        switch self {
        case .tooLarge(let reason), .invalid(let reason), .unsupported(let reason): reason
        }
    }

    public var description: String { "\(code): \(reason)" }
}

/// The image jobs' codes (`docs/images.md`).
extension JobErrorCode {
    public static let imageTooLarge = Self(rawValue: "IMAGE_TOO_LARGE")
    public static let imageInvalid = Self(rawValue: "IMAGE_INVALID")
    public static let imageUnsupported = Self(rawValue: "IMAGE_UNSUPPORTED")
    /// The upload or the normalised image the job names is not in storage.
    public static let imageNotFound = Self(rawValue: "IMAGE_NOT_FOUND")
    /// A payload that decodes but asks for what the kind does not do.
    public static let badPayload = Self(rawValue: "BAD_PAYLOAD")
    public static let backgroundRemovalUnavailable = Self(rawValue: "BACKGROUND_REMOVAL_UNAVAILABLE")
    public static let backgroundRemovalRejected = Self(rawValue: "BACKGROUND_REMOVAL_REJECTED")
}
