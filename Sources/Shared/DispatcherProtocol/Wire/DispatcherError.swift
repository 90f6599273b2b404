/// An error code of the dispatcher's protocol. A struct rather than an enum so that a client
/// keeps working when a newer server sends a code it does not know.
public struct DispatcherErrorCode: RawRepresentable, Codable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String

    public init(rawValue: String) { self.rawValue = rawValue }
    public init(from decoder: any Decoder) throws { rawValue = try decoder.singleValueContainer().decode(String.self) }
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
    public var description: String { rawValue }

    // Protocol errors.
    /// Not a JSON object, or no usable `id` or `op`.
    public static let malformedFrame = Self(rawValue: "MALFORMED_FRAME")
    /// Longer than the server's limit; the connection is closed.
    public static let frameTooLarge = Self(rawValue: "FRAME_TOO_LARGE")
    /// A frame started but its newline did not arrive in time; the connection is closed.
    public static let frameTimeout = Self(rawValue: "FRAME_TIMEOUT")
    /// Nothing sent and nothing in flight for too long; the connection is closed.
    public static let idleTimeout = Self(rawValue: "IDLE_TIMEOUT")
    public static let unknownOp = Self(rawValue: "UNKNOWN_OP")
    /// An op before `auth` (TCP): the connection stays open. A wrong token, or one revoked since
    /// `auth`: the connection is closed.
    public static let unauthenticated = Self(rawValue: "UNAUTHENTICATED")
    /// The connection's access token has a role that may not use this op; the connection stays open.
    public static let forbidden = Self(rawValue: "FORBIDDEN")
    public static let badArgument = Self(rawValue: "BAD_ARGUMENT")
    /// `job.retry` of a job that is not `dead` or `cancelled`.
    public static let jobNotRetryable = Self(rawValue: "JOB_NOT_RETRYABLE")
    /// `job.discard` of a job still queued or running.
    public static let jobNotFinished = Self(rawValue: "JOB_NOT_FINISHED")
    public static let notFound = Self(rawValue: "NOT_FOUND")
    public static let unknownKind = Self(rawValue: "UNKNOWN_KIND")
    /// The server is at its connection limit; the connection is closed.
    public static let tooManyConnections = Self(rawValue: "TOO_MANY_CONNECTIONS")
    /// The database cannot be reached right now; worth retrying.
    public static let unavailable = Self(rawValue: "UNAVAILABLE")
    public static let `internal` = Self(rawValue: "INTERNAL")

    // Business errors (docs/product.md, "Error codes").
    public static let insufficientCredits = Self(rawValue: "INSUFFICIENT_CREDITS")
    public static let renderFailed = Self(rawValue: "RENDER_FAILED")
    public static let renderTimeout = Self(rawValue: "RENDER_TIMEOUT")
    public static let invalidCategory = Self(rawValue: "INVALID_CATEGORY")
    public static let subscriptionExpired = Self(rawValue: "SUBSCRIPTION_EXPIRED")
    public static let imageTooLarge = Self(rawValue: "IMAGE_TOO_LARGE")
    /// An onboarding token that is unknown, expired or already linked.
    public static let invalidToken = Self(rawValue: "INVALID_TOKEN")
    /// The onboarding token's one free render was already requested.
    public static let tokenAlreadyUsed = Self(rawValue: "TOKEN_ALREADY_USED")
    /// `render.request` with a render id that is another requester's render.
    public static let renderIdConflict = Self(rawValue: "RENDER_ID_CONFLICT")
    /// Feedback on a render that is not complete.
    public static let renderNotComplete = Self(rawValue: "RENDER_NOT_COMPLETE")
    /// `render.retry` of a render that is not failed, or whose job has not ended yet.
    public static let renderNotRetryable = Self(rawValue: "RENDER_NOT_RETRYABLE")
    /// At the provider's capacity the render could not finish within its deadline: refused at
    /// once, nothing reserved or queued; the error carries `retryAfterSeconds`.
    public static let renderBusy = Self(rawValue: "RENDER_BUSY")
    /// `upload.presign` or `image.url` on a dispatcher whose image store is files: presigned
    /// URLs need `FLEET_STORAGE=s3://…`.
    public static let storageNotPresignable = Self(rawValue: "STORAGE_NOT_PRESIGNABLE")
}

/// An error as the protocol carries it: a typed code and a message for people, and for
/// `RENDER_BUSY` when to ask again (left out of the frame otherwise).
public struct DispatcherError: Error, Codable, Sendable, Equatable, CustomStringConvertible {
    public let code: DispatcherErrorCode
    public let message: String
    public let retryAfterSeconds: Int?

    public init(_ code: DispatcherErrorCode, _ message: String, retryAfterSeconds: Int? = nil) {
        self.code = code
        self.message = message
        self.retryAfterSeconds = retryAfterSeconds
    }

    public var description: String { "\(code): \(message)" }
}
