import FleetSupport
import Logging
import ServiceLifecycle

/// Runs the jobs of one kind. Throw `JobError.permanent` for failures retrying cannot fix
/// (bad input); anything else thrown is retried with backoff until attempts run out.
/// Cancellation (a cancel request, a lost lease, shutdown) arrives as Task cancellation.
public protocol JobHandler: Sendable {
    var kind: JobKind { get }
    /// Its jobs carry limit keys (`NewJob.limitKeys`): the worker claims them within the
    /// fleet-wide limits. False for kinds that never do, whose claim pays nothing for limits.
    var usesLimits: Bool { get }
    /// Returns the job's result (kept in `jobs.result`), or nil.
    func run(_ job: ClaimedJob, context: JobContext) async throws -> JSONValue?
    /// What must run beside it (a waiter registry fed by notifications): services of the
    /// worker's group, started before the worker runtime and stopped after its drain.
    var services: [any Service] { get }
    /// Why the process cannot do this kind's work now (its store refusing writes), which
    /// `/readyz` answers with; nil when it can.
    var unreadyReason: String? { get async }
}

extension JobHandler {
    public var usesLimits: Bool { false }
    public var services: [any Service] { [] }
    public var unreadyReason: String? { nil }
}

/// What a handler gets besides its job.
public struct JobContext: Sendable {
    /// Carries `job_id`, `kind` and `attempt` on every line.
    public let logger: Logger
    public let workerID: String
    /// For follow-up jobs. Enqueue them with an idempotency key derived from this job, so a
    /// retried or rescued run does not enqueue them twice.
    public let queue: JobQueue
    /// The end the handler wrote in its own transaction (`end`), which the worker then does not
    /// write again.
    let endedByHandler = HandlerEnding()

    /// The jobs `job` runs after (`NewJob.after`), each with the result its handler recorded.
    public func dependencies(of job: ClaimedJob) async throws -> [JobDependency] {
        try await queue.dependencies(of: job.id)
    }

    public init(logger: Logger, workerID: String, queue: JobQueue) {
        self.logger = logger
        self.workerID = workerID
        self.queue = queue
    }
}
