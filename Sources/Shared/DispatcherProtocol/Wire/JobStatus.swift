import FleetSupport
import Foundation

/// One job as the protocol shows it (`status`, `wait`). Optional fields are sent as explicit nulls.
public struct JobStatus: Codable, Sendable, Equatable {
    /// A job's state: `waiting` (for the jobs it runs after, `waitingOn`), `available` (perhaps
    /// for its `runAt`), `running`, and the terminal `completed`, `dead` (out of attempts) and
    /// `cancelled`.
    public enum State: String, Codable, Sendable, CaseIterable {
        case waiting, available, running, completed, dead, cancelled

        public var isTerminal: Bool { self == .completed || self == .dead || self == .cancelled }
    }

    public struct AttemptError: Codable, Sendable, Equatable {
        public let attempt: Int
        public let at: Date
        public let error: String
        @ExplicitNull public private(set) var code: String?
        @ExplicitNull public private(set) var worker: String?

        public init(attempt: Int, at: Date, error: String, code: String?, worker: String?) {
            self.attempt = attempt
            self.at = at
            self.error = error
            self.code = code
            self.worker = worker
        }
    }

    public let id: Int64
    public let kind: String
    public let queue: String
    public let state: State
    public let priority: Int
    public let attempt: Int
    public let maxAttempts: Int
    public let payload: JSONValue
    @ExplicitNull public private(set) var result: JSONValue?
    /// One per failed attempt.
    public let errors: [AttemptError]
    @ExplicitNull public private(set) var idempotencyKey: String?
    /// The worker running it, while it runs.
    @ExplicitNull public private(set) var workerId: String?
    public let cancelRequested: Bool
    public let createdAt: Date
    public let runAt: Date
    @ExplicitNull public private(set) var startedAt: Date?
    @ExplicitNull public private(set) var finishedAt: Date?
    /// The jobs it runs after (`options.after`), ascending.
    public let after: [Int64]
    /// Those of them not completed yet (while `waiting`: what it waits on).
    public let waitingOn: [Int64]

    public var isTerminal: Bool { state.isTerminal }

    public init(
        id: Int64, kind: String, queue: String, state: State, priority: Int, attempt: Int, maxAttempts: Int,
        payload: JSONValue, result: JSONValue?, errors: [AttemptError], idempotencyKey: String?, workerId: String?,
        cancelRequested: Bool, createdAt: Date, runAt: Date, startedAt: Date?, finishedAt: Date?, after: [Int64] = [], waitingOn: [Int64] = []
    ) {
        self.after = after
        self.waitingOn = waitingOn
        self.id = id
        self.kind = kind
        self.queue = queue
        self.state = state
        self.priority = priority
        self.attempt = attempt
        self.maxAttempts = maxAttempts
        self.payload = payload
        self.result = result
        self.errors = errors
        self.idempotencyKey = idempotencyKey
        self.workerId = workerId
        self.cancelRequested = cancelRequested
        self.createdAt = createdAt
        self.runAt = runAt
        self.startedAt = startedAt
        self.finishedAt = finishedAt
    }
}

/// The queue at a glance (`stats`).
public struct QueueStats: Codable, Sendable, Equatable {
    public struct Kind: Codable, Sendable, Equatable {
        public let kind: String
        /// Available and due: the depth workers see.
        public let due: Int
        /// Available, waiting for a delay or a retry backoff.
        public let scheduled: Int
        public let running: Int
        /// Available again after at least one failed attempt.
        public let retrying: Int
        /// Waiting for the jobs they run after.
        public let waiting: Int
        /// Of the cancelled: ended because a job they ran after failed (`DEPENDENCY_FAILED`).
        public let dependencyFailed: Int
        /// Finished within the window.
        public let completed: Int
        public let dead: Int
        public let cancelled: Int
        /// How long the oldest due job has been waiting (the lag); null when none is due.
        @ExplicitNull public private(set) var oldestDueSeconds: Double?
        /// No worker claims it (the kind is paused, `queue.pause`).
        public let paused: Bool

        public init(
            kind: String, due: Int, scheduled: Int, running: Int, retrying: Int, completed: Int, dead: Int, cancelled: Int,
            oldestDueSeconds: Double?, paused: Bool, waiting: Int = 0, dependencyFailed: Int = 0
        ) {
            self.waiting = waiting
            self.dependencyFailed = dependencyFailed
            self.paused = paused
            self.kind = kind
            self.due = due
            self.scheduled = scheduled
            self.running = running
            self.retrying = retrying
            self.completed = completed
            self.dead = dead
            self.cancelled = cancelled
            self.oldestDueSeconds = oldestDueSeconds
        }
    }

    public struct Worker: Codable, Sendable, Equatable {
        public let id: String
        public let host: String
        public let pid: Int
        public let executable: String
        public let kinds: [String]
        public let startedAt: Date
        public let lastHeartbeatAt: Date
        /// Jobs it holds a lease on.
        public let running: Int
        /// Those of its kinds it does not claim now (paused).
        public let pausedKinds: [String]

        public init(
            id: String, host: String, pid: Int, executable: String, kinds: [String], startedAt: Date, lastHeartbeatAt: Date, running: Int,
            pausedKinds: [String]
        ) {
            self.pausedKinds = pausedKinds
            self.id = id
            self.host = host
            self.pid = pid
            self.executable = executable
            self.kinds = kinds
            self.startedAt = startedAt
            self.lastHeartbeatAt = lastHeartbeatAt
            self.running = running
        }
    }

    /// A pause in force (`queue.pause`): a kind's or a named queue's jobs are not claimed.
    public struct Pause: Codable, Sendable, Equatable {
        public enum Scope: String, Codable, Sendable { case kind, queue }
        public let scope: Scope
        public let name: String
        /// The access token's name that paused it.
        public let pausedBy: String
        public let pausedAt: Date
        public init(scope: Scope, name: String, pausedBy: String, pausedAt: Date) {
            self.scope = scope
            self.name = name
            self.pausedBy = pausedBy
            self.pausedAt = pausedAt
        }
    }

    public let windowSeconds: Int
    public let kinds: [Kind]
    /// Workers not stopped whose heartbeat is recent.
    public let workers: [Worker]
    public let pauses: [Pause]
    /// The fleet-wide limits and their use (as `limits.list`).
    public let limits: [LimitView]
    public let serverTime: Date

    public init(windowSeconds: Int, kinds: [Kind], workers: [Worker], pauses: [Pause], limits: [LimitView], serverTime: Date) {
        self.windowSeconds = windowSeconds
        self.kinds = kinds
        self.workers = workers
        self.pauses = pauses
        self.limits = limits
        self.serverTime = serverTime
    }
}
