/// One kind's line of the queue's statistics.
public struct KindStats: Sendable, Equatable {
    public let kind: JobKind
    /// Available and due now.
    public let due: Int
    /// Available, not due yet (delay or retry backoff).
    public let scheduled: Int
    public let running: Int
    /// Available after at least one failed attempt.
    public let retrying: Int
    /// Waiting for the jobs they run after.
    public let waiting: Int
    /// Finished within the window, by terminal state.
    public let completed: Int
    /// Of the cancelled: those a failed dependency ended (`DEPENDENCY_FAILED`).
    public let dependencyFailed: Int
    public let dead: Int
    public let cancelled: Int
    /// How long the oldest due job has been due (the queue's lag); nil when none is due.
    public let oldestDueAge: Duration?
}
