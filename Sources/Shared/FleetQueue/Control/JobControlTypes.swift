import Foundation

/// One line of `jobs.list`: the job without its payload and result, with its latest error.
public struct JobSummary: Sendable, Hashable {
    public let id: Int64
    public let kind: JobKind
    public let queue: String
    public let state: JobState
    public let priority: Int
    public let attempt: Int
    public let maxAttempts: Int
    public let lastError: JobAttemptError?
    /// The worker running it, while it runs.
    public let workerID: String?
    public let createdAt: Date
    public let runAt: Date
    public let startedAt: Date?
    public let finishedAt: Date?
}

/// What `job.retry` did.
public enum JobRetryResult: Sendable, Equatable {
    /// It is `available` again (at its new run-at).
    case retried
    /// Only `dead` and `cancelled` jobs are retried; it is in this state.
    case notRetryable(JobState)
    /// Its kind's `JobRetryGuard` leaves it as it is.
    case refused(RetryRefusal)
    case notFound
}

/// What `job.discard` did.
public enum JobDiscardResult: Sendable, Equatable {
    case discarded
    /// Only finished jobs are deleted; it is in this state.
    case notFinished(JobState)
    case notFound
}

/// What an operator pauses: every job of a kind, or of a named queue.
public struct PauseTarget: Sendable, Hashable, Codable {
    public enum Scope: String, Sendable, Codable, CaseIterable { case kind, queue }
    public let scope: Scope
    public let name: String

    public init(scope: Scope, name: String) {
        self.scope = scope
        self.name = name
    }

    public static func kind(_ kind: JobKind) -> PauseTarget { PauseTarget(scope: .kind, name: kind.rawValue) }
    public static func queue(_ name: String) -> PauseTarget { PauseTarget(scope: .queue, name: name) }
}

/// A pause in force: no worker claims its jobs until it is resumed.
public struct QueuePause: Sendable, Hashable {
    public let target: PauseTarget
    public let pausedBy: String
    public let pausedAt: Date
}

/// One operator action as the audit trail keeps it.
public struct AuditEntry: Sendable, Hashable {
    public let id: Int64
    public let at: Date
    /// The access token's name (or `unix-socket`).
    public let actor: String
    /// The op, e.g. `jobs.retry`.
    public let action: String
    /// The job id, the filter or the paused target, as JSON.
    public let target: String
    /// Rows changed (or counted, for a dry run).
    public let affected: Int
}

/// Dead jobs of one kind whose latest error has one code; its sample is its newest job.
public struct DeadJobGroup: Sendable {
    public let kind: String
    public let errorCode: String?
    public let count: Int
    public let firstSeen: Date
    public let lastSeen: Date
    public let sampleJobID: Int64
    public let samplePayload: String
}

/// The queue per kind now, and what finished in the last hour.
public struct QueueOverview: Sendable {
    public struct Kind: Decodable, Sendable {
        public let kind: String
        public let due: Int
        public let scheduled: Int
        public let retrying: Int
        /// Waiting for the jobs they run after.
        public let waiting: Int
        public let running: Int
        public let lagSeconds: Double?
        public let completed: Int
        public let dead: Int
        public let paused: Bool
    }

    public let kinds: [Kind]
    /// Completed and dead per minute over the last hour, oldest minute first (60 entries).
    public let minutes: [(completed: Int, failed: Int)]
}

