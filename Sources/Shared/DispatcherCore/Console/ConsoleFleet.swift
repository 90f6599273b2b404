import FleetAccess
import DispatcherProtocol
import FleetPostgres
import FleetQueue
import Foundation
import Logging
import Renders

/// What the console reads and does. Every action and every read an op already answers goes
/// through that op (`perform`), with the caller's role checked as the socket checks it and the
/// caller set for the audit trail: the console adds no second way to change the queue. The
/// reads no op answers (the overview, which refreshes every 2 s and must not count the whole
/// table as `stats` does; dead-job groups; the schedule's slots; renders across users) are asked
/// of the modules that own those tables: the console writes no SQL. With a read replica
/// (`FLEET_READ_DATABASE_URL`) the pages' reads go there; the job page, which decides the
/// actions offered, and every action stay on the primary.
struct ConsoleFleet: Sendable {
    let pool: PostgresPool
    let queue: JobQueue
    let control: JobControl
    /// The replica's pool, nil without one.
    let replica: PostgresPool?
    /// Where the pages read: the replica's pool, or `pool`.
    let readPool: PostgresPool
    let readQueue: JobQueue
    let readControl: JobControl
    let schedule: ScheduleSettings
    /// A worker whose heartbeat is older than this is silent (as `stats` counts live workers).
    let liveWorkerWithin: Duration

    let jobsList: JobsListOperation
    let jobGet: JobGetOperation
    let jobRetry: JobRetryOperation
    let jobsRetry: JobsRetryOperation
    let jobDiscard: JobDiscardOperation
    let jobsDiscard: JobsDiscardOperation
    let cancel: CancelOperation
    let pause: QueuePauseOperation
    let resume: QueueResumeOperation
    let audit: AuditListOperation

    init(pool: PostgresPool, readPool replica: PostgresPool? = nil, schedule: ScheduleSettings, liveWorkerWithin: Duration, logger: Logger) {
        let queue = JobQueue(executor: pool, knownKinds: FleetKinds.all)
        let control = queue.control(logger: logger, retryGuard: RenderJobRetryGuard())
        let readPool = replica ?? pool
        let readQueue = replica.map { JobQueue(executor: $0, knownKinds: FleetKinds.all) } ?? queue
        let readControl = replica.map { _ in readQueue.control(logger: logger) } ?? control
        self.pool = pool
        self.queue = queue
        self.control = control
        self.replica = replica
        self.readPool = readPool
        self.readQueue = readQueue
        self.readControl = readControl
        self.schedule = schedule
        self.liveWorkerWithin = liveWorkerWithin
        jobsList = JobsListOperation(control: readControl)
        jobGet = JobGetOperation(queue: queue)
        jobRetry = JobRetryOperation(queue: queue, control: control)
        jobsRetry = JobsRetryOperation(control: control)
        jobDiscard = JobDiscardOperation(control: control)
        jobsDiscard = JobsDiscardOperation(control: control)
        cancel = CancelOperation(queue: queue)
        // The console has no render admission of its own: the dispatcher's hears its pauses on `fleet_control`.
        pause = QueuePauseOperation(control: control, knownKinds: queue.knownKinds, changed: {})
        resume = QueueResumeOperation(control: control, changed: {})
        audit = AuditListOperation(control: readControl)
    }

    /// Runs an op as `caller`: refused (`FORBIDDEN`) outside the op's roles, exactly as on the socket.
    func perform<Operation: DispatcherOperation>(_ operation: Operation, _ request: Operation.Request, as caller: Caller) async throws
        -> Operation.Request.Result
    {
        guard case .roles(let roles) = operation.access, roles.contains(caller.role) else {
            throw DispatcherError(.forbidden, "the token '\(caller.name)' (\(caller.role.rawValue)) may not use \(Operation.Request.op)")
        }
        do {
            return try await Caller.$current.withValue(caller) { try await operation.run(request) }
        } catch {
            throw DispatcherError(mapping: error)
        }
    }

    /// `cancel` is a backend's op and records nothing; from the console it is an operator's
    /// action like the others, so it lands in the audit trail.
    func cancelJob(_ jobId: Int64, as caller: Caller) async throws -> CancelRequest.Result {
        guard caller.role == .operate else { throw DispatcherError(.forbidden, "the token '\(caller.name)' may not cancel jobs") }
        let result = try await perform(cancel, CancelRequest(jobId: jobId), as: caller)
        if result.outcome != .alreadyFinished {
            try await control.record(actor: caller.name, action: "job.cancel", target: ["jobId": jobId], affected: 1)
        }
        return result
    }

    // MARK: Reads no op answers, each from the module that owns its table

    func deadGroups() async throws -> [DeadJobGroup] { try await readControl.deadGroups() }

    func overview() async throws -> QueueOverview { try await readControl.overview() }

    /// The replica's replay lag; nil without a replica.
    func replicaLag() async throws -> ReplicaLag? {
        guard let replica else { return nil }
        return try await ReplicaLag.measure(on: replica)
    }

    /// The oldest snapshot in the fleet's database, read on the primary (where it holds back vacuum).
    func snapshotHorizon() async throws -> SnapshotHorizon { try await SnapshotHorizon.measure(on: pool) }

    /// Every live-or-silent worker not stopped within the last day: the ones whose heartbeat is
    /// older than `liveWorkerWithin` are silent (died, or hung).
    func workers() async throws -> [(worker: LiveWorker, silent: Bool)] {
        let now = Date()
        return try await readQueue.liveWorkers(heartbeatWithin: .seconds(86_400)).map { worker in
            (worker, now.timeIntervalSince(worker.lastHeartbeatAt) > Double(liveWorkerWithin.components.seconds))
        }
    }

    /// Each schedule entry's latest slot run.
    func lastSlots() async throws -> [String: ScheduleSlots.Run] { try await ScheduleSlots(pool: readPool).lastRuns() }

    func renders(_ filter: RenderStore.Filter) async throws -> [RenderStore.Line] { try await RenderStore(pool: readPool).recent(filter) }

    func renderSettings() async throws -> RenderSettings { try await RenderSettings.load(from: pool) }
}
