import FleetQueue
import FleetSupport
import Foundation

/// One job as the protocol shows it (`status`, `wait`). Optional fields are sent as explicit nulls.
public struct JobStatus: Codable, Sendable, Equatable {
    public struct AttemptError: Codable, Sendable, Equatable {
        public let attempt: Int
        public let at: Date
        public let error: String
        @ExplicitNull public private(set) var code: String?
        @ExplicitNull public private(set) var worker: String?
    }

    public let id: Int64
    public let kind: String
    public let queue: String
    public let state: JobState
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

    public var isTerminal: Bool { state.isTerminal }

    public init(_ record: JobRecord) {
        id = record.id
        kind = record.kind.rawValue
        queue = record.queue
        state = record.state
        priority = record.priority
        attempt = record.attempt
        maxAttempts = record.maxAttempts
        // jsonb text from the table: valid JSON by construction.
        payload = (try? JSONValue(json: record.payload)) ?? .null
        result = record.result.flatMap { try? JSONValue(json: $0) }
        errors = record.errors.map { AttemptError(attempt: $0.attempt, at: $0.at, error: $0.error, code: $0.code, worker: $0.worker) }
        idempotencyKey = record.idempotencyKey
        workerId = record.leaseOwner
        cancelRequested = record.cancelRequested
        createdAt = record.createdAt
        runAt = record.runAt
        startedAt = record.startedAt
        finishedAt = record.finishedAt
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
        /// Finished within the window.
        public let completed: Int
        public let dead: Int
        public let cancelled: Int
        /// How long the oldest due job has been waiting (the lag); null when none is due.
        @ExplicitNull public private(set) var oldestDueSeconds: Double?

        public init(_ stats: KindStats) {
            kind = stats.kind.rawValue
            due = stats.due
            scheduled = stats.scheduled
            running = stats.running
            retrying = stats.retrying
            completed = stats.completed
            dead = stats.dead
            cancelled = stats.cancelled
            oldestDueSeconds = stats.oldestDueAge?.seconds
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

        public init(_ worker: LiveWorker) {
            id = worker.record.id
            host = worker.record.host
            pid = Int(worker.record.pid)
            executable = worker.record.executable
            kinds = worker.record.kinds.map(\.rawValue)
            startedAt = worker.startedAt
            lastHeartbeatAt = worker.lastHeartbeatAt
            running = worker.running
        }
    }

    public let windowSeconds: Int
    public let kinds: [Kind]
    /// Workers not stopped whose heartbeat is recent.
    public let workers: [Worker]
    public let serverTime: Date

    public init(windowSeconds: Int, kinds: [Kind], workers: [Worker], serverTime: Date) {
        self.windowSeconds = windowSeconds
        self.kinds = kinds
        self.workers = workers
        self.serverTime = serverTime
    }
}
