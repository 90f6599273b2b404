import FleetSupport

/// The queue's own codes of a failed attempt.
extension JobErrorCode {
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
