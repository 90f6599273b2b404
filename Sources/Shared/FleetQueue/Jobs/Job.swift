import FleetSupport
import Foundation

/// Where a job is in its life. `completed`, `dead` and `cancelled` are terminal; `waiting`: some
/// job it runs after (`NewJob.after`) is not completed yet.
public enum JobState: String, Codable, Sendable, CaseIterable {
    case waiting, available, running, completed, dead, cancelled

    public var isTerminal: Bool { self == .completed || self == .dead || self == .cancelled }
}

/// A job to enqueue.
public struct NewJob: Sendable, Hashable {
    public var kind: JobKind
    /// JSON object text handed to the handler.
    public var payload: String
    public var queue: String
    /// 0 runs first, 9 last.
    public var priority: Int
    /// How long to wait before the first run.
    public var delay: Duration
    public var maxAttempts: Int
    /// Enqueueing the same key again returns the first job instead of a second one.
    public var idempotencyKey: String?
    /// Keys the fleet-wide limits count this job under (`ConcurrencyLimit`), e.g. its provider
    /// and its user. Only kinds whose handler says `usesLimits` are claimed under limits.
    public var limitKeys: [String] = []
    /// Where the fleet POSTs the job's signed end (`callback.deliver`, enqueued by the database
    /// in the transaction that ends the job). Checked against the allow-list by whoever accepts it.
    public var callbackURL: String?
    /// Jobs it runs after (at most `maxDependencies`, each existing and not `dead` or
    /// `cancelled`): it waits, unclaimable, until every one is `completed`, and ends
    /// `DEPENDENCY_FAILED` if one ends otherwise (`docs/queue.md`, "Dependencies").
    public var after: [Int64] = []

    /// Most jobs one job may run after.
    public static let maxDependencies = 100

    /// The traceparent its worker's spans continue, for a job inserted away from the span that
    /// asked for it (the dispatcher's group commit); nil: the inserting span's.
    public var traceParent: String?

    /// The fields `enqueue` checks, named in `QueueError.invalidJob`.
    public enum Field: String, Sendable {
        case payload, queue, priority, delay, maxAttempts, idempotencyKey, limitKeys, after
    }

    public init(
        kind: JobKind, payload: String = "{}", queue: String = "default", priority: Int = 2,
        delay: Duration = .zero, maxAttempts: Int = 5, idempotencyKey: String? = nil, limitKeys: [String] = []
    ) {
        self.limitKeys = limitKeys
        self.kind = kind
        self.payload = payload
        self.queue = queue
        self.priority = priority
        self.delay = delay
        self.maxAttempts = maxAttempts
        self.idempotencyKey = idempotencyKey
    }

    /// A job of its payload's own kind.
    public init<Payload: JobPayload>(_ payload: Payload, queue: String = "default", priority: Int = 2,
                                     delay: Duration = .zero, maxAttempts: Int = 5, idempotencyKey: String? = nil,
                                     limitKeys: [String] = []) throws {
        try self.init(kind: Payload.kind, encoding: payload, queue: queue, priority: priority, delay: delay,
                      maxAttempts: maxAttempts, idempotencyKey: idempotencyKey)
        self.limitKeys = limitKeys
    }

    /// A job of a kind named at run time (the dispatcher's `enqueue`, the schedule).
    public init<Payload: Encodable>(kind: JobKind, encoding payload: Payload, queue: String = "default", priority: Int = 2,
                                    delay: Duration = .zero, maxAttempts: Int = 5, idempotencyKey: String? = nil) throws {
        self.init(kind: kind, payload: String(decoding: try JSONEncoder().encode(payload), as: UTF8.self), queue: queue,
                  priority: priority, delay: delay, maxAttempts: maxAttempts, idempotencyKey: idempotencyKey)
    }
}

/// What enqueueing one job gave: its id, and whether it is new or an earlier job with the same key.
public struct EnqueuedJob: Sendable, Hashable {
    public let id: Int64
    public let isNew: Bool
}

/// A job a worker holds a lease on, for one attempt.
public struct ClaimedJob: Sendable, Hashable {
    public let id: Int64
    public let kind: JobKind
    public let queue: String
    public let priority: Int
    /// 1 on the first run.
    public let attempt: Int
    public let maxAttempts: Int
    public let payload: String
    /// When it was enqueued (the insert statement's start, by the database's clock).
    public let createdAt: Date
    /// The enqueueing span's traceparent: the worker's spans for this job continue its trace.
    public var traceParent: String? = nil

    /// Decodes the payload; a payload of the wrong shape is a permanent failure, not a crash.
    public func decodePayload<T: Decodable>(_ type: T.Type) throws -> T {
        do {
            return try JSONDecoder().decode(type, from: Data(payload.utf8))
        } catch {
            throw JobError.permanent(code: .malformedPayload, message: "malformed \(kind) payload: \(describe(error))")
        }
    }
}

/// One failed attempt, as kept in the job's `errors`.
public struct JobAttemptError: Codable, Sendable, Hashable {
    public let attempt: Int
    public let at: Date
    public let error: String
    public let code: String?
    public let worker: String?
}

/// Everything the table knows of one job.
public struct JobRecord: Sendable, Hashable {
    public let id: Int64
    public let kind: JobKind
    public let queue: String
    public let state: JobState
    public let priority: Int
    public let attempt: Int
    public let maxAttempts: Int
    public let payload: String
    public let result: String?
    public let errors: [JobAttemptError]
    public let idempotencyKey: String?
    public let leaseOwner: String?
    public let cancelRequested: Bool
    public let createdAt: Date
    public let runAt: Date
    public let startedAt: Date?
    public let finishedAt: Date?
    /// The jobs it runs after (`NewJob.after`), ascending.
    public var dependsOn: [Int64] = []
    /// Those of them not completed yet.
    public var waitingOn: [Int64] = []
}

/// A job another job runs after, with what its handler recorded (`jobs.result`), as the
/// dependent's handler reads it (`JobQueue.dependencies(of:)`) and the console lists it.
public struct JobDependency: Sendable, Hashable {
    public let id: Int64
    public let kind: JobKind
    public let state: JobState
    /// JSON text, or nil.
    public let result: String?
}

/// Jobs sought by what they work on rather than by id (`JobQueue.pendingJobs(matching:in:)`):
/// those of `kind` whose payload holds every field of `payloadContains` with the same value
/// (jsonb containment, `@>`). The module that owns the payload writes its matches; the queue
/// knows no payload.
public struct JobMatch: Sendable, Hashable {
    public let kind: JobKind
    /// JSON object text.
    public let payloadContains: String

    /// `fields` encoded as a JSON object.
    public init(kind: JobKind, payloadContains fields: some Encodable) throws {
        self.kind = kind
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        payloadContains = String(decoding: try encoder.encode(fields), as: UTF8.self)
    }
}

/// Bounds a handler's result: the row, the `status` answer and the callback all carry it.
public enum JobResultLimit {
    public static let maxBytes = 65_536

    /// A permanent failure when `json` is larger than `maxBytes`.
    static func check(_ json: String) throws {
        let size = json.utf8.count
        guard size <= maxBytes else {
            throw JobError.permanent(code: .resultTooLarge, message: "the job's result is \(size) bytes of JSON; at most \(maxBytes) (64 KiB) may be recorded: keep large outputs in storage and return their key")
        }
    }
}

/// How an attempt ended, as the worker records it.
public struct JobOutcome: Sendable, Hashable {
    public enum Kind: Sendable, Hashable {
        /// Done; `result` is JSON text or nil.
        case completed(result: String?)
        /// Failed; runs again after `retryIn`.
        case retry(error: String, code: JobErrorCode?, retryIn: Duration)
        /// Failed for good: attempts exhausted or a permanent error.
        case dead(error: String, code: JobErrorCode?)
        /// Stopped because someone cancelled it.
        case cancelled
        /// Not finished: handed back to the queue (shutdown), the attempt not counted.
        case returned
        /// Could not run yet (`JobDeferral.retryIn`): available again after `retryIn`, the attempt
        /// not counted, `error` kept among its errors.
        case deferred(error: String, code: JobErrorCode?, retryIn: Duration)
        /// Could not run yet (`JobDeferral.runAfter`): waits for `jobs`, the attempt not counted.
        /// Written at once by its own transaction (`PostgresQueueDriver.jobRunAfter`), never batched.
        case runAfter(jobs: [Int64])
    }

    public let jobID: Int64
    public let attempt: Int
    public let kind: Kind

    public init(jobID: Int64, attempt: Int, kind: Kind) {
        self.jobID = jobID
        self.attempt = attempt
        self.kind = kind
    }
}

/// How a handler says an attempt failed. Any other error thrown counts as `.retryable`.
public enum JobError: Error, CustomStringConvertible, Sendable {
    /// Worth another attempt (after backoff), if attempts remain.
    case retryable(String)
    /// Retrying cannot help: the job goes `dead` at once, with `code`.
    case permanent(code: JobErrorCode, message: String)

    public var description: String {
        switch self {
        case .retryable(let message): message
        case .permanent(let code, let message): "\(code): \(message)"
        }
    }
}

/// A readable one-line account of any error.
func describe(_ error: any Error) -> String {
    if let error = error as? DecodingError {
        switch error {
        case .dataCorrupted(let context): return "not valid JSON (\(context.debugDescription))"
        case .keyNotFound(let key, _): return "missing field '\(key.stringValue)'"
        case .typeMismatch(_, let context), .valueNotFound(_, let context):
            let path = context.codingPath.map(\.stringValue).joined(separator: ".")
            return "field '\(path)': \(context.debugDescription)"
        @unknown default: return "\(error)"
        }
    }
    return "\(error)"
}
