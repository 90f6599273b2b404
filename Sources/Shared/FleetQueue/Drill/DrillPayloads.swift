/// The queue's own synthetic kinds, for load drills, the queue benchmarks and the tests: they
/// exercise the queue and nothing else (their handlers are in the DrillKinds target).
extension JobKind {
    public static let drillNoop = DrillNoop.kind
    public static let drillScript = DrillScript.kind
}

/// `drill.noop`: does nothing; with `sentAtNs` (wall-clock nanoseconds at enqueue) its result
/// is the start latency.
public struct DrillNoop: JobPayload, Equatable {
    public static let kind: JobKind = "drill.noop"
    public static let summary = "synthetic: does nothing (queue benchmarks and load drills)"
    public let sentAtNs: Int64?

    public init(sentAtNs: Int64? = nil) { self.sentAtNs = sentAtNs }
}

/// `drill.script`: sleeps, fails or crashes as it says.
public struct DrillScript: JobPayload, Equatable {
    public static let kind: JobKind = "drill.script"
    public static let summary = "synthetic: sleeps, fails or crashes as its payload says (queue tests and drills)"
    /// Sleeps this long (honouring cancellation).
    public var sleepMs: Int?
    /// Fails with a retryable error while `attempt <= failAttempts`.
    public var failAttempts: Int?
    /// Fails permanently (`DRILL_PERMANENT`); with `failAttempts`, only while `attempt <= failAttempts`,
    /// so an operator's retry of the dead job succeeds (the console's browser test).
    public var permanent: Bool?
    /// Ignores cancellation while sleeping (a handler stuck in C code, say).
    public var ignoreCancel: Bool?
    /// Then sleeps until this wall-clock instant (ns since 1970), so jobs in several processes
    /// end at the same moment (the dependency race tests).
    public var sleepUntilNs: Int64?
    /// Reads the jobs it runs after: fails for good (`DRILL_DEPENDENCY_PENDING`) if one is not
    /// completed, and returns the ids of those whose recorded result it read (`after`).
    public var readDependencies: Bool?
    /// Returns a result of about this many bytes (`{"padding": "xxx…"}`), to test the bound.
    public var resultBytes: Int?

    public init(sleepMs: Int? = nil, failAttempts: Int? = nil, permanent: Bool? = nil, ignoreCancel: Bool? = nil,
                sleepUntilNs: Int64? = nil, readDependencies: Bool? = nil, resultBytes: Int? = nil) {
        self.resultBytes = resultBytes
        self.sleepUntilNs = sleepUntilNs
        self.readDependencies = readDependencies
        self.sleepMs = sleepMs
        self.failAttempts = failAttempts
        self.permanent = permanent
        self.ignoreCancel = ignoreCancel
    }
}
