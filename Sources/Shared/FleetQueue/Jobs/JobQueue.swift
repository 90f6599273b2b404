import FleetPostgres
import Foundation
import Logging

/// The queue as its callers see it: enqueue, look up, cancel. Workers use `WorkerRuntime`.
public struct JobQueue: Sendable {
    let driver: PostgresQueueDriver
    /// Kinds accepted by `enqueue`; nil accepts any, for callers that enqueue only kinds they
    /// name in code (a worker's follow-up jobs).
    public let knownKinds: KnownKinds?

    init(driver: PostgresQueueDriver, knownKinds: KnownKinds?) {
        self.driver = driver
        self.knownKinds = knownKinds
    }

    /// The queue on `executor`: a pool, or a caller's connection whose transaction the queue's
    /// statements join.
    public init(executor: any PostgresExecutor, knownKinds: KnownKinds?) {
        self.init(driver: PostgresQueueDriver(executor: executor), knownKinds: knownKinds)
    }

    /// The operators' side of the same queue, on the same executor (`JobControl`).
    public func control(logger: Logger? = nil, retryGuard: (any JobRetryGuard)? = nil) -> JobControl {
        JobControl(driver: driver, logger: logger, retryGuard: retryGuard)
    }

    /// Enqueues one job.
    public func enqueue(_ job: NewJob) async throws -> EnqueuedJob {
        try await enqueue([job])[0]
    }

    /// Enqueues many jobs in one round trip, all or none; results are in input order.
    public func enqueue(_ jobs: [NewJob]) async throws -> [EnqueuedJob] {
        try await insert(jobs) { try await driver.jobInsertMany($0) }
    }

    /// Enqueues jobs that have nothing to do with one another (the dispatcher's group commit) in
    /// one statement, each with its own result in input order: a job refused by validation is
    /// refused alone before the insert; when the database refuses the statement for a reason other
    /// than the connection (one job's payload it cannot store), each job is inserted again on its
    /// own, so no job fails for another's. A lost connection fails them all alike: the statement
    /// is one transaction, committed for all of them or for none.
    public func enqueueEach(_ jobs: [NewJob]) async -> [Result<EnqueuedJob, any Error>] {
        var results = [Result<EnqueuedJob, any Error>?](repeating: nil, count: jobs.count)
        var valid: [Int] = []
        for (index, job) in jobs.enumerated() {
            do {
                try validate(job)
                valid.append(index)
            } catch {
                results[index] = .failure(error)
            }
        }
        do {
            let enqueued = try await enqueue(valid.map { jobs[$0] })
            for (index, job) in zip(valid, enqueued) { results[index] = .success(job) }
        } catch let error as PostgresError where error.isTransient {
            for index in valid { results[index] = .failure(error) }
        } catch {
            for index in valid {
                do { results[index] = .success(try await enqueue(jobs[index])) } catch { results[index] = .failure(error) }
            }
        }
        return results.map { $0! }
    }

    /// Enqueues within the caller's transaction (River's `InsertTx`): the jobs commit or roll
    /// back with the caller's own statements, validated as `enqueue` validates them, of kinds
    /// the caller names in code (no `knownKinds` to check). `announce: false` leaves waking the
    /// workers to the caller (after its commit, or a trigger of its own).
    public static func enqueue(_ jobs: [NewJob], announce: Bool = true, in transaction: PostgresConnection) async throws -> [EnqueuedJob] {
        let driver = PostgresQueueDriver(executor: transaction)
        return try await JobQueue(driver: driver, knownKinds: nil).insert(jobs) { try await driver.jobInsertMany($0, announce: announce) }
    }

    /// Enqueues a graph's jobs atomically, each after the jobs it names (`JobGraph`); answers
    /// each node's job in node order.
    public func enqueue(_ graph: JobGraph) async throws -> [EnqueuedJob] {
        try await insert(graph.nodes.map(\.job)) { _ in try await driver.jobInsertGraph(graph, announce: true) }
    }

    /// Enqueues a graph's jobs within the caller's transaction, as `enqueue(_:in:)` does jobs.
    public static func enqueue(_ graph: JobGraph, in transaction: PostgresConnection) async throws -> [EnqueuedJob] {
        let driver = PostgresQueueDriver(executor: transaction)
        return try await JobQueue(driver: driver, knownKinds: nil).enqueue(graph)
    }

    /// The jobs not ended yet (`waiting`, `available`, `running`) matching any of `matches`, at
    /// most `limit`, ascending, read in the caller's transaction: what a job about to be enqueued
    /// there runs after so that it finds their work done (a render after the jobs still making its
    /// photos). One that ends before the enqueue locks it is what `after` makes of it: completed,
    /// done; `dead` or `cancelled`, the enqueue is refused (`QueueError.failedDependency`).
    public static func pendingJobs(
        matching matches: [JobMatch], limit: Int = NewJob.maxDependencies, in transaction: PostgresConnection
    ) async throws -> [JobDependency] {
        try await PostgresQueueDriver(executor: transaction).jobPendingMatching(matches, limit: limit)
    }

    /// Puts `id` back, if `dead` or `cancelled`, with `attempts` more attempts, in the caller's
    /// transaction, together with the `dead` and `cancelled` jobs it runs after (and those they
    /// run after): each waits again for the jobs it runs after, so none waits for a job that
    /// will never run. For the owner of a job's work that decided to run it again (a render an
    /// operator retried); answers the ids put back.
    public static func retryWithFailedDependencies(id: Int64, attempts: Int, in transaction: PostgresConnection) async throws -> [Int64] {
        try await PostgresQueueDriver(executor: transaction).jobRetryWithFailedDependencies(id: id, attempts: attempts)
    }

    /// `pendingJobs(matching:limit:in:)` outside a transaction: what a running job looks for when
    /// it must not start before the jobs making its inputs (`JobDeferral.runAfter`).
    public func pendingJobs(matching matches: [JobMatch], limit: Int = NewJob.maxDependencies) async throws -> [JobDependency] {
        try await driver.jobPendingMatching(matches, limit: limit)
    }

    /// The jobs `id` runs after, with their results: what a dependent's handler reads.
    public func dependencies(of id: Int64) async throws -> [JobDependency] { try await driver.jobDependencies(of: id) }

    /// Up to `limit` jobs that run after `id` and wait for it, ascending (no results).
    public func dependents(of id: Int64, limit: Int) async throws -> [JobDependency] { try await driver.jobDependents(of: id, limit: limit) }

    private func insert(_ jobs: [NewJob], with insertMany: ([NewJob]) async throws -> [EnqueuedJob]) async throws -> [EnqueuedJob] {
        for job in jobs { try validate(job) }
        do {
            return try await insertMany(jobs)
        } catch PostgresError.server(.invalidTextRepresentation, let message, _) where message.contains("json") {
            // The server parses payloads anyway; parsing each one here as well would halve the enqueue rate.
            throw QueueError.invalidJob(field: .payload, reason: "must be a JSON object (\(message))")
        }
    }

    public func job(id: Int64) async throws -> JobRecord? { try await driver.jobGet(id: id) }

    /// The states of those of `ids` that exist (one statement, by primary key).
    public func states(of ids: [Int64]) async throws -> [Int64: JobState] { try await driver.jobStates(ids: ids) }

    public func cancel(id: Int64) async throws -> CancelResult { try await driver.jobCancel(id: id) }

    /// Asks for `QueueChannel.finished` when the job ends; call it before reading the job's state
    /// for the first time, once subscribed.
    public func watchFinish(id: Int64) async throws { try await driver.jobWatchFinish(id: id) }

    public func stats(window: Duration) async throws -> [KindStats] { try await driver.jobStats(window: window) }

    /// How long jobs of `kinds` have been taking to run lately (mean over the newest 20 completed
    /// in the last 10 minutes), for estimates such as render admission's wait for its inputs.
    public func recentRunTimes(of kinds: [JobKind]) async throws -> [JobKind: Duration] {
        try await driver.jobRecentRunTimes(kinds: kinds, window: .seconds(600), samples: 20)
    }

    public func liveWorkers(heartbeatWithin: Duration) async throws -> [LiveWorker] {
        try await driver.workerListLive(heartbeatWithin: heartbeatWithin)
    }

    func validate(_ job: NewJob) throws {
        if let knownKinds, !knownKinds.contains(job.kind) { throw QueueError.unknownKind(job.kind.rawValue) }
        try job.validate()
    }
}
