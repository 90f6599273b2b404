/// The code of a failed attempt: what `jobs.errors[].code` holds, `status` shows and `jobs.list`
/// filters on. One type for the queue's boundary: the queue's own codes are here, and each
/// domain declares its codes beside its errors (`ImageError`, `BackgroundRemovalError`,
/// `ProviderError`). A struct, so that codes written by a newer version still read.
public struct JobErrorCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String

    public init(rawValue: String) { self.rawValue = rawValue }

    public var description: String { rawValue }

    /// The payload does not decode as the kind's payload type.
    public static let malformedPayload = Self(rawValue: "MALFORMED_PAYLOAD")
    /// No handler of this fleet runs the kind.
    public static let unknownKind = Self(rawValue: "UNKNOWN_KIND")
    /// Cancelled on request while running.
    public static let cancelled = Self(rawValue: "CANCELLED")
    /// The worker stopped renewing its lease (it died, or lost the database) and the job was rescued.
    public static let leaseExpired = Self(rawValue: "LEASE_EXPIRED")
    /// The worker's session ended (its process died, or lost its LISTEN connection) and the
    /// reaper took the job back within about a second (`WorkerLock`).
    public static let workerLost = Self(rawValue: "WORKER_LOST")
    /// A job it runs after (`NewJob.after`) ended `dead` or `cancelled`, so it never ran.
    public static let dependencyFailed = Self(rawValue: "DEPENDENCY_FAILED")
    /// The handler's result is larger than `JobResultLimit.maxBytes`.
    public static let resultTooLarge = Self(rawValue: "RESULT_TOO_LARGE")
}

/// An error that carries its job error code: recorded with the failed attempt even when the
/// attempt is retried.
public protocol CodedError: Error {
    var code: JobErrorCode { get }
}
