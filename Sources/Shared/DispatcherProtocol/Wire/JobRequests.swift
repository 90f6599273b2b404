import FleetSupport
import Foundation

/// One operation of the dispatcher's protocol, as its arguments: the op name and the result
/// type travel with it, so the server's handler and every client agree on all three.
public protocol DispatcherRequest: Codable, Sendable {
    associatedtype Result: Codable, Sendable
    static var op: String { get }
    /// Whether sending this request a second time, after a connection broke with it in flight,
    /// cannot do anything the first one did not (RequestSafety.swift says which are).
    var isSafeToRepeat: Bool { get }
    /// The request to send again `elapsed` after the first time: itself, but for waits, which go
    /// on for what is left of their timeout.
    func resent(after elapsed: Duration) -> Self
}

/// `ping`: allowed before `auth`.
public struct PingRequest: DispatcherRequest {
    public static let op = "ping"
    public struct Result: Codable, Sendable {
        public let pong: Bool
        public let serverTime: Date
        public init(serverTime: Date) {
            self.pong = true
            self.serverTime = serverTime
        }
    }
    public init() {}
}

/// What an access token may do. `submit`: what a backend needs (enqueue, the image and render
/// ops, status, wait, cancel); `read`: look (status, wait, stats, lists, the audit trail);
/// `operate`: everything, job control included.
public enum AccessRole: String, Codable, Sendable, CaseIterable {
    case submit, operate, read
}

/// `auth`: an access token (TCP). A wrong token closes the connection.
public struct AuthRequest: DispatcherRequest {
    public static let op = "auth"
    public struct Result: Codable, Sendable {
        public let authenticated: Bool
        /// The token's name (the audit trail's actor) and role.
        public let name: String
        public let role: AccessRole
        public init(name: String, role: AccessRole) {
            authenticated = true
            self.name = name
            self.role = role
        }
    }
    public let token: String
    public init(token: String) { self.token = token }
}

/// The queue's options for a new job; each one left out takes the queue's default.
public struct JobOptions: Codable, Sendable, Equatable {
    public var queue: String?
    /// 0 runs first, 9 last; default 2.
    public var priority: Int?
    /// Default 5.
    public var maxAttempts: Int?
    /// Wait before the first run, in seconds.
    public var delaySeconds: Double?
    /// Enqueueing the same key again returns the first job.
    public var idempotencyKey: String?
    /// Keys the fleet-wide limits count the job under (`limits.list`); only kinds whose workers
    /// claim under limits honour them (docs/queue.md, "Limits").
    public var limitKeys: [String]?
    /// Where the fleet POSTs the job's signed end (docs/protocol.md, "Completion callbacks");
    /// its host must be in the dispatcher's `FLEET_OUTBOUND_HOSTS`.
    public var callbackUrl: String?
    /// Ids of jobs it runs after (at most 100): it is `waiting`, not run, until every one is
    /// `completed`, and ends `cancelled` with `DEPENDENCY_FAILED` if one ends otherwise.
    public var after: [Int64]?

    public init(queue: String? = nil, priority: Int? = nil, maxAttempts: Int? = nil, delaySeconds: Double? = nil, idempotencyKey: String? = nil,
                limitKeys: [String]? = nil, callbackUrl: String? = nil, after: [Int64]? = nil) {
        self.after = after
        self.limitKeys = limitKeys
        self.callbackUrl = callbackUrl
        self.queue = queue
        self.priority = priority
        self.maxAttempts = maxAttempts
        self.delaySeconds = delaySeconds
        self.idempotencyKey = idempotencyKey
    }
}

/// What every enqueueing op answers.
public struct EnqueuedJobResult: Codable, Sendable, Equatable {
    public let jobId: Int64
    public let kind: String
    /// false: a job with the same idempotency key already existed, and this is it.
    public let isNew: Bool

    public init(jobId: Int64, kind: String, isNew: Bool) {
        self.jobId = jobId
        self.kind = kind
        self.isNew = isNew
    }
}

/// `enqueue`: any job kind, with a payload object.
public struct EnqueueRequest: DispatcherRequest {
    public static let op = "enqueue"
    public typealias Result = EnqueuedJobResult
    public let kind: String
    public let payload: [String: JSONValue]?
    public let options: JobOptions?

    public init(kind: String, payload: [String: JSONValue] = [:], options: JobOptions? = nil) {
        self.kind = kind
        self.payload = payload
        self.options = options
    }
}

/// `jobs.enqueueGraph`: several jobs that run after one another, named locally, inserted
/// together (all or none) and answered together.
public struct EnqueueGraphRequest: DispatcherRequest {
    public static let op = "jobs.enqueueGraph"
    public static let maxJobs = 1_000

    /// What a graph's job runs after: another job of the graph, by its name, or an existing job, by id.
    public enum Dependency: Codable, Sendable, Equatable, Hashable {
        case job(name: String)
        case id(Int64)

        public init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let id = try? container.decode(Int64.self) {
                self = .id(id)
            } else {
                self = .job(name: try container.decode(String.self))
            }
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            switch self {
            case .job(let name): try container.encode(name)
            case .id(let id): try container.encode(id)
            }
        }
    }

    public struct Job: Codable, Sendable, Equatable {
        /// Unique in the graph, 1 to 64 bytes.
        public let name: String
        public let kind: String
        public let payload: [String: JSONValue]?
        /// The queue's options; no `idempotencyKey` (the graph's covers its jobs) and no `after`
        /// (the job's own `after` says it).
        public let options: JobOptions?
        /// Names of jobs of the graph and ids of existing jobs it runs after.
        public let after: [Dependency]?

        public init(name: String, kind: String, payload: [String: JSONValue] = [:], options: JobOptions? = nil, after: [Dependency] = []) {
            self.name = name
            self.kind = kind
            self.payload = payload
            self.options = options
            self.after = after
        }
    }

    public struct Result: Codable, Sendable, Equatable {
        public struct Job: Codable, Sendable, Equatable {
            public let name: String
            public let jobId: Int64
            public let kind: String
            public init(name: String, jobId: Int64, kind: String) {
                self.name = name
                self.jobId = jobId
                self.kind = kind
            }
        }
        /// In the request's order.
        public let jobs: [Job]
        /// false: the idempotency key named a graph enqueued before, and these are its jobs.
        public let isNew: Bool
        public init(jobs: [Job], isNew: Bool) {
            self.jobs = jobs
            self.isNew = isNew
        }
    }

    public let jobs: [Job]
    /// Enqueueing the same key again answers the first graph's jobs.
    public let idempotencyKey: String?

    public init(jobs: [Job], idempotencyKey: String? = nil) {
        self.jobs = jobs
        self.idempotencyKey = idempotencyKey
    }
}

/// `image.normalize`: normalise an upload into a body photo or a garment photo.
public struct NormalizeImageRequest: DispatcherRequest {
    public static let op = "image.normalize"
    public typealias Result = EnqueuedJobResult
    /// What the upload becomes.
    public enum Target: String, Codable, Sendable, WireEnum { case body, garment }
    public let userId: String
    public let uploadId: String
    public let target: Target
    /// The body photo's or the garment's id.
    public let imageId: String
    /// A normalise profile's name (built in: `upload`, `trial-room`, `thumb`; more in
    /// `fleet_settings`); nil: `upload`.
    public let profile: String?
    public let options: JobOptions?

    public init(userId: String, uploadId: String, target: Target, imageId: String, profile: String? = nil, options: JobOptions? = nil) {
        self.userId = userId
        self.uploadId = uploadId
        self.target = target
        self.imageId = imageId
        self.profile = profile
        self.options = options
    }
}

/// `garment.process`: normalise a garment upload, then remove its background.
public struct ProcessGarmentRequest: DispatcherRequest {
    public static let op = "garment.process"

    /// The normalise job (`jobId`, as every enqueueing op answers) and the cut-out job that runs after it.
    public struct Result: Codable, Sendable, Equatable {
        public let jobId: Int64
        public let kind: String
        /// false: the idempotency key named jobs enqueued before, and these are they.
        public let isNew: Bool
        /// The `garment.cutout` job: its end is the garment's (a failed normalisation ends it
        /// `cancelled`, `DEPENDENCY_FAILED`).
        public let cutoutJobId: Int64

        public init(jobId: Int64, kind: String, isNew: Bool, cutoutJobId: Int64) {
            self.jobId = jobId
            self.kind = kind
            self.isNew = isNew
            self.cutoutJobId = cutoutJobId
        }
    }

    public let userId: String
    public let uploadId: String
    public let garmentId: String
    public let options: JobOptions?

    public init(userId: String, uploadId: String, garmentId: String, options: JobOptions? = nil) {
        self.userId = userId
        self.uploadId = uploadId
        self.garmentId = garmentId
        self.options = options
    }
}

/// `account.purge`: delete every file of one user.
public struct PurgeAccountRequest: DispatcherRequest {
    public static let op = "account.purge"
    public typealias Result = EnqueuedJobResult
    public let userId: String
    public let options: JobOptions?

    public init(userId: String, options: JobOptions? = nil) {
        self.userId = userId
        self.options = options
    }
}

/// `status`: one job as the table knows it.
public struct StatusRequest: DispatcherRequest {
    public static let op = "status"
    public typealias Result = JobStatus
    public let jobId: Int64
    public init(jobId: Int64) { self.jobId = jobId }
}

/// `wait`: answers when the job reaches a terminal state, or when `timeoutMs` has passed.
public struct WaitRequest: DispatcherRequest {
    public static let op = "wait"
    public static let defaultTimeoutMs = 30_000
    public static let maxTimeoutMs = 300_000
    public struct Result: Codable, Sendable {
        public let job: JobStatus
        /// true: the job had not finished when the wait ended (timeout, or the server shutting down).
        public let timedOut: Bool
        public init(job: JobStatus, timedOut: Bool) {
            self.job = job
            self.timedOut = timedOut
        }
    }
    public let jobId: Int64
    /// Default 30,000; at most 300,000.
    public let timeoutMs: Int?

    public init(jobId: Int64, timeoutMs: Int? = nil) {
        self.jobId = jobId
        self.timeoutMs = timeoutMs
    }
}

/// `cancel`: a queued job is cancelled; a running one's worker is told to stop.
public struct CancelRequest: DispatcherRequest {
    public static let op = "cancel"
    public struct Result: Codable, Sendable, Equatable {
        public enum Outcome: String, Codable, Sendable { case cancelled, requested, alreadyFinished }
        public let outcome: Outcome
        /// The job's state after the call (`running` for `requested`).
        public let state: JobStatus.State
        /// The worker told to stop (`requested` only).
        @ExplicitNull public private(set) var workerId: String?

        public init(outcome: Outcome, state: JobStatus.State, workerId: String?) {
            self.outcome = outcome
            self.state = state
            self.workerId = workerId
        }
    }
    public let jobId: Int64
    public init(jobId: Int64) { self.jobId = jobId }
}

/// `stats`: queue depth, lag and failures per kind, live workers.
public struct StatsRequest: DispatcherRequest {
    public static let op = "stats"
    public typealias Result = QueueStats
    public static let defaultWindowSeconds = 3600
    /// How far back finished jobs are counted; default 3600, at most 7 days.
    public let windowSeconds: Int?
    public init(windowSeconds: Int? = nil) { self.windowSeconds = windowSeconds }
}
