import FleetSupport
import Foundation

/// Which jobs a job-control op means; every field left out matches all, the fields combine with AND.
public struct JobFilterArguments: Codable, Sendable, Equatable {
    public var states: [JobStatus.State]?
    public var kinds: [String]?
    public var queues: [String]?
    /// The code of the job's latest error, e.g. `PROVIDER_DOWN`.
    public var errorCode: String?
    public var createdAfter: Date?
    public var createdBefore: Date?
    public var finishedAfter: Date?
    public var finishedBefore: Date?

    public init(
        states: [JobStatus.State]? = nil, kinds: [String]? = nil, queues: [String]? = nil, errorCode: String? = nil,
        createdAfter: Date? = nil, createdBefore: Date? = nil, finishedAfter: Date? = nil, finishedBefore: Date? = nil
    ) {
        self.states = states
        self.kinds = kinds
        self.queues = queues
        self.errorCode = errorCode
        self.createdAfter = createdAfter
        self.createdBefore = createdBefore
        self.finishedAfter = finishedAfter
        self.finishedBefore = finishedBefore
    }
}

/// `job.get`: one job whole (payload, options, every failed attempt with its error and worker, timings).
public struct JobGetRequest: DispatcherRequest {
    public static let op = "job.get"
    public typealias Result = JobStatus
    public let jobId: Int64
    public init(jobId: Int64) { self.jobId = jobId }
}

/// One line of `jobs.list`.
public struct JobSummaryView: Codable, Sendable, Equatable {
    public let id: Int64
    public let kind: String
    public let queue: String
    public let state: JobStatus.State
    public let priority: Int
    public let attempt: Int
    public let maxAttempts: Int
    @ExplicitNull public private(set) var lastError: JobStatus.AttemptError?
    /// The worker running it, while it runs.
    @ExplicitNull public private(set) var workerId: String?
    public let createdAt: Date
    public let runAt: Date
    @ExplicitNull public private(set) var startedAt: Date?
    @ExplicitNull public private(set) var finishedAt: Date?

    public init(
        id: Int64, kind: String, queue: String, state: JobStatus.State, priority: Int, attempt: Int, maxAttempts: Int,
        lastError: JobStatus.AttemptError?, workerId: String?, createdAt: Date, runAt: Date, startedAt: Date?, finishedAt: Date?
    ) {
        self.workerId = workerId
        self.id = id
        self.kind = kind
        self.queue = queue
        self.state = state
        self.priority = priority
        self.attempt = attempt
        self.maxAttempts = maxAttempts
        self.lastError = lastError
        self.createdAt = createdAt
        self.runAt = runAt
        self.startedAt = startedAt
        self.finishedAt = finishedAt
    }
}

/// `jobs.list`: jobs matching a filter, newest first, a page at a time (keyset: pass the
/// answer's `nextCursor` back; null when there is no further page).
public struct JobsListRequest: DispatcherRequest {
    public static let op = "jobs.list"
    public static let defaultLimit = 50
    public static let maxLimit = 500
    public struct Result: Codable, Sendable, Equatable {
        public let jobs: [JobSummaryView]
        @ExplicitNull public private(set) var nextCursor: String?
        public init(jobs: [JobSummaryView], nextCursor: String?) {
            self.jobs = jobs
            self.nextCursor = nextCursor
        }
    }
    public let filter: JobFilterArguments?
    /// Default 50, at most 500.
    public let limit: Int?
    public let cursor: String?

    public init(filter: JobFilterArguments? = nil, limit: Int? = nil, cursor: String? = nil) {
        self.filter = filter
        self.limit = limit
        self.cursor = cursor
    }
}

/// `job.retry`: a `dead` or `cancelled` job back to `available` (at `runAt`, default now), its
/// errors kept, one more attempt allowed. Any other state, or a job its work's owner keeps as it
/// is (a `render.run` job whose render has ended: the message names `render retry`): `JOB_NOT_RETRYABLE`.
public struct JobRetryRequest: DispatcherRequest {
    public static let op = "job.retry"
    public typealias Result = JobStatus
    public let jobId: Int64
    public let runAt: Date?
    public init(jobId: Int64, runAt: Date? = nil) {
        self.jobId = jobId
        self.runAt = runAt
    }
}

/// `job.discard`: deletes one finished job. Queued or running: `JOB_NOT_FINISHED`.
public struct JobDiscardRequest: DispatcherRequest {
    public static let op = "job.discard"
    public struct Result: Codable, Sendable, Equatable {
        public let jobId: Int64
        public let discarded: Bool
        public init(jobId: Int64) {
            self.jobId = jobId
            self.discarded = true
        }
    }
    public let jobId: Int64
    public init(jobId: Int64) { self.jobId = jobId }
}

/// What a bulk op did (or, for a dry run, would do).
public struct BulkJobsResult: Codable, Sendable, Equatable {
    /// Matching jobs a bulk retry left as they are, for one reason: the module owning their work
    /// decides (a `render.run` job whose render has ended is retried with its render, `render.retry`).
    public struct LeftAlone: Codable, Sendable, Equatable {
        public let reason: String
        public let count: Int
        /// The first few, oldest first (at most 10).
        public let sampleJobIds: [Int64]
        public init(reason: String, count: Int, sampleJobIds: [Int64]) {
            self.reason = reason
            self.count = count
            self.sampleJobIds = sampleJobIds
        }
    }

    public let count: Int
    public let dryRun: Bool
    /// `jobs.retry` only, when it left matching jobs alone; absent otherwise.
    public let leftAlone: [LeftAlone]?
    public init(count: Int, dryRun: Bool, leftAlone: [LeftAlone]? = nil) {
        self.count = count
        self.dryRun = dryRun
        self.leftAlone = leftAlone
    }
}

/// An operator's action on every job a filter matches (`jobs.retry`, `jobs.discard`): at most
/// `limit` of them, counted without acting when `dryRun`.
public protocol BulkJobsRequest: DispatcherRequest where Result == BulkJobsResult {
    var filter: JobFilterArguments? { get }
    var limit: Int { get }
    var dryRun: Bool? { get }
}

extension BulkJobsRequest {
    public static var maxLimit: Int { 1_000_000 }
}

/// `jobs.retry`: `job.retry` for up to `limit` `dead`/`cancelled` jobs matching the filter,
/// oldest first, in batches that never stall the workers. `dryRun` only counts them. Jobs whose
/// work's owner says no (a `render.run` job whose render has ended) are left alone and counted
/// in `leftAlone`, by reason.
public struct JobsRetryRequest: BulkJobsRequest {
    public static let op = "jobs.retry"
    public typealias Result = BulkJobsResult
    public let filter: JobFilterArguments?
    /// Required: at most this many (up to 1,000,000).
    public let limit: Int
    public let dryRun: Bool?

    public init(filter: JobFilterArguments? = nil, limit: Int, dryRun: Bool? = nil) {
        self.filter = filter
        self.limit = limit
        self.dryRun = dryRun
    }
}

/// `jobs.discard`: deletes up to `limit` finished jobs matching the filter; `dryRun` counts them.
public struct JobsDiscardRequest: BulkJobsRequest {
    public static let op = "jobs.discard"
    public typealias Result = BulkJobsResult
    public let filter: JobFilterArguments?
    /// Required: at most this many (up to 1,000,000).
    public let limit: Int
    public let dryRun: Bool?

    public init(filter: JobFilterArguments? = nil, limit: Int, dryRun: Bool? = nil) {
        self.filter = filter
        self.limit = limit
        self.dryRun = dryRun
    }
}

/// What `queue.pause` and `queue.resume` answer: the pauses now in force.
public struct QueuePausesResult: Codable, Sendable, Equatable {
    /// false: it already was paused (or, for resume, was not).
    public let changed: Bool
    public let pauses: [QueueStats.Pause]
    public init(changed: Bool, pauses: [QueueStats.Pause]) {
        self.changed = changed
        self.pauses = pauses
    }
}

/// `queue.pause`: no worker claims the kind's (or queue's) jobs from its next claim on, within a
/// second; running jobs finish. A row: it survives restarts until `queue.resume`.
public struct QueuePauseRequest: DispatcherRequest {
    public static let op = "queue.pause"
    public typealias Result = QueuePausesResult
    /// Exactly one of `kind` and `queue`.
    public let kind: String?
    public let queue: String?
    public init(kind: String? = nil, queue: String? = nil) {
        self.kind = kind
        self.queue = queue
    }
}

/// `queue.resume`: lifts a pause and wakes the workers.
public struct QueueResumeRequest: DispatcherRequest {
    public static let op = "queue.resume"
    public typealias Result = QueuePausesResult
    /// Exactly one of `kind` and `queue`.
    public let kind: String?
    public let queue: String?
    public init(kind: String? = nil, queue: String? = nil) {
        self.kind = kind
        self.queue = queue
    }
}

/// `audit.list`: operator actions, newest first, a page at a time.
public struct AuditListRequest: DispatcherRequest {
    public static let op = "audit.list"
    public struct Entry: Codable, Sendable, Equatable {
        public let id: Int64
        public let at: Date
        /// The access token's name, or `unix-socket`.
        public let actor: String
        public let action: String
        /// The job id, the filter and limit, or the paused target.
        public let target: JSONValue
        public let affected: Int
        public init(id: Int64, at: Date, actor: String, action: String, target: JSONValue, affected: Int) {
            self.id = id
            self.at = at
            self.actor = actor
            self.action = action
            self.target = target
            self.affected = affected
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public let entries: [Entry]
        @ExplicitNull public private(set) var nextCursor: String?
        public init(entries: [Entry], nextCursor: String?) {
            self.entries = entries
            self.nextCursor = nextCursor
        }
    }
    public let limit: Int?
    public let cursor: String?
    public init(limit: Int? = nil, cursor: String? = nil) {
        self.limit = limit
        self.cursor = cursor
    }
}
