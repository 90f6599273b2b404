import Foundation

/// An opaque id (cuid2 in the backend) checked so that no path can leave the storage tree:
/// 1 to 64 characters of `A-Z a-z 0-9 _ -`.
public struct StorageID: Hashable, Sendable, CustomStringConvertible, Codable {
    public let value: String

    public init(_ value: String) throws {
        guard (1...64).contains(value.utf8.count),
              value.utf8.allSatisfy({ $0.isASCIIAlphanumeric || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-") }) else {
            throw StorageError.invalidID(String(value.prefix(80)))
        }
        self.value = value
    }

    public init(from decoder: any Decoder) throws {
        try self.init(try decoder.singleValueContainer().decode(String.self))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(value)
    }

    public var description: String { value }
}

/// Where each file of a user lives, relative to the storage root (docs/product.md, "Images";
/// the upload and the preview are the fleet's additions).
public enum StorageKey: Hashable, Sendable {
    /// An upload as the backend stored it, before normalisation.
    case upload(user: StorageID, upload: StorageID)
    case bodyPhoto(user: StorageID, photo: StorageID)
    case garment(user: StorageID, garment: StorageID)
    case garmentCutout(user: StorageID, garment: StorageID)
    case garmentPreview(user: StorageID, garment: StorageID)
    case render(user: StorageID, render: StorageID)

    public var user: StorageID {
        switch self {
        case .upload(let user, _), .bodyPhoto(let user, _), .garment(let user, _), .garmentCutout(let user, _),
             .garmentPreview(let user, _), .render(let user, _): user
        }
    }

    /// The key whose `relativePath` is `path`; nil for any other path (a file the fleet did not
    /// lay out). A garment id ending in `_cutout` or `_preview` names the same path as another
    /// garment's cut-out or preview: either reading gives back `path`, which is all a copy needs.
    public init?(relativePath path: String) {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 3, let user = try? StorageID(String(parts[0])) else { return nil }
        let name = String(parts[2])
        func id(dropping suffix: String) -> StorageID? {
            guard name.hasSuffix(suffix) else { return nil }
            return try? StorageID(String(name.dropLast(suffix.count)))
        }
        let key: StorageKey? = switch parts[1] {
        case "uploads": (try? StorageID(name)).map { .upload(user: user, upload: $0) }
        case "body": id(dropping: ".jpg").map { .bodyPhoto(user: user, photo: $0) }
        case "renders": id(dropping: ".jpg").map { .render(user: user, render: $0) }
        case "garments":
            id(dropping: "_cutout.png").map { .garmentCutout(user: user, garment: $0) }
                ?? id(dropping: "_preview.jpg").map { .garmentPreview(user: user, garment: $0) }
                ?? id(dropping: ".jpg").map { .garment(user: user, garment: $0) }
        default: nil
        }
        guard let key, key.relativePath == path else { return nil }
        self = key
    }

    /// The path below the root, e.g. `u1/garments/g1_cutout.png`.
    public var relativePath: String {
        switch self {
        case .upload(let user, let upload): "\(user)/uploads/\(upload)"
        case .bodyPhoto(let user, let photo): "\(user)/body/\(photo).jpg"
        case .garment(let user, let garment): "\(user)/garments/\(garment).jpg"
        case .garmentCutout(let user, let garment): "\(user)/garments/\(garment)_cutout.png"
        case .garmentPreview(let user, let garment): "\(user)/garments/\(garment)_preview.jpg"
        case .render(let user, let render): "\(user)/renders/\(render).jpg"
        }
    }
}

public enum StorageError: Error, CustomStringConvertible, Sendable, Equatable {
    case invalidID(String)
    case notFound(String)
    /// An object larger than the reader's bound: its bytes were not fetched.
    case tooLarge(String, bytes: Int, limit: Int)
    /// A conditional write found an object at the key and left it.
    case alreadyExists(String)

    public var description: String {
        switch self {
        case .invalidID(let id): "invalid id '\(id)': 1 to 64 characters of A-Z, a-z, 0-9, _ and -"
        case .notFound(let path): "no file at \(path)"
        case .tooLarge(let path, let bytes, let limit): "\(path) has \(bytes) bytes, more than \(limit)"
        case .alreadyExists(let path): "an object is stored at \(path) already"
        }
    }
}

/// Why a store refused a write: one list for every store (this file tree, object storage later),
/// the codes the jobs that met them record (`errors[].code`) and operators filter on
/// (`docs/images.md`, "Storage outages"). Each is the infrastructure's fault, not the job's.
public enum StorageFailureCode: String, Sendable, CaseIterable {
    /// No space left (`ENOSPC`), or the user's quota spent (`EDQUOT`).
    case full = "STORAGE_FULL"
    /// The store cannot take writes now: mounted read-only (`EROFS`), an I/O error, a network
    /// filesystem gone (`EIO`, `ENXIO`, `ENODEV`, `ENOTCONN`, `ESTALE`, `ETIMEDOUT`, `EHOSTDOWN`).
    case unavailable = "STORAGE_UNAVAILABLE"
    /// The process may not write there (`EACCES`, `EPERM`): a deployment's permissions.
    case denied = "STORAGE_DENIED"

    /// The code of a failed system call's `errno`; nil for one that says nothing of the store
    /// (a name too long, say: the caller's fault).
    public init?(errno code: Int32) {
        switch code {
        case ENOSPC, EDQUOT: self = .full
        case EROFS, EIO, ENXIO, ENODEV, ENOTCONN, ESTALE, ETIMEDOUT, EHOSTDOWN: self = .unavailable
        case EACCES, EPERM: self = .denied
        default: return nil
        }
    }
}

/// A read or write the store refused: `code` when it is an outage of the store (`StorageFailureCode`).
public struct StorageFailure: Error, CustomStringConvertible, Sendable, Equatable {
    public let path: String
    public let reason: String
    public let code: StorageFailureCode?
    /// Whether a read failed (a write otherwise).
    public let reading: Bool

    public init(path: String, reason: String, code: StorageFailureCode?, reading: Bool = false) {
        self.path = path
        self.reason = reason
        self.code = code
        self.reading = reading
    }

    /// From a failed system call's `errno`.
    public init(path: String, errno code: Int32, reading: Bool = false) {
        self.init(path: path, reason: String(cString: strerror(code)), code: StorageFailureCode(errno: code), reading: reading)
    }

    public var description: String { "cannot \(reading ? "read" : "write") \(path): \(reason)" }
}

private extension UInt8 {
    var isASCIIAlphanumeric: Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(self) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(self)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(self)
    }
}
