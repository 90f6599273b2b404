import Foundation

/// The queue's storage seam: one method per operation, named entity then verb. Every
/// state change of a running job is a compare-and-set on "still running, still this
/// owner, still this attempt", so a worker that lost its lease cannot overwrite anything.
public protocol QueueDriver: Sendable {
    /// Inserts jobs in one statement; an idempotency key already present returns the first job.
    /// `announce`: wake the workers of their kinds (`QueueChannel.jobs`) within the statement.
    func jobInsertMany(_ jobs: [NewJob], announce: Bool) async throws -> [EnqueuedJob]
    /// Leases up to `slots[kind]` due jobs of each kind, priority then run-at order; the kinds in
    /// `request.limitedKinds` within the fleet-wide limits (`ConcurrencyLimit`): whether a rule
    /// exists is the driver's to know. `start` gets the jobs as each statement returns them (the
    /// kinds without limits first, before any transaction under the rules' lock, so that none of
    /// them waits for it); the result holds all of them too, and the kinds a limit held back.
    func jobClaim(_ request: ClaimRequest, start: ([ClaimedJob]) -> Void) async throws -> ClaimResult
    /// Records outcomes of attempts `owner` still holds; returns the ids it applied.
    func jobFinishMany(owner: String, outcomes: [JobOutcome]) async throws -> Set<Int64>
    /// Renews the leases `owner` still holds among `ids` and heartbeats the worker row.
    func jobExtendLeases(owner: String, ids: [Int64], lease: Duration) async throws -> LeaseRenewal
    /// Marks the job as waited for: its end then notifies `fleet_jobs_finished` (jobs nobody waits
    /// for end without a notification, but those holding a limited slot).
    func jobWatchFinish(id: Int64) async throws
    /// Cancels a queued job, or asks the worker running it to stop.
    func jobCancel(id: Int64) async throws -> CancelResult
    func jobGet(id: Int64) async throws -> JobRecord?
    /// The states of those of `ids` that exist.
    func jobStates(ids: [Int64]) async throws -> [Int64: JobState]
    /// Puts back running jobs whose lease expired, counting the attempt.
    func jobRescueExpired(limit: Int) async throws -> [RescuedJob]
    /// Deletes up to `limit` finished jobs older than their retention, oldest first, those that
    /// finished at `from` or later (microseconds since 1970; nil: from the oldest).
    func jobDeleteFinished(_ retention: Retention, limit: Int, from: Int64?) async throws -> PrunedBatch
    /// Ends as `dead` the queued jobs whose kind is not in `known`, once older than `grace`.
    func jobKillUnknownKinds(known: Set<JobKind>, grace: Duration) async throws -> [Int64]
    /// Per kind: jobs due, scheduled, running, waiting for a retry, finished within `window`, and the oldest due job's age.
    func jobStats(window: Duration) async throws -> [KindStats]
    /// Per kind of `kinds`: the mean run time (start of the last attempt to completion) of its
    /// newest `samples` jobs completed within `window`; a kind with none is absent.
    func jobRecentRunTimes(kinds: [JobKind], window: Duration, samples: Int) async throws -> [JobKind: Duration]

    // Dependencies (`docs/queue.md`, "Dependencies").
    /// Inserts a graph's jobs, each after the jobs it names, in one transaction; in node order.
    func jobInsertGraph(_ graph: JobGraph, announce: Bool) async throws -> [EnqueuedJob]
    /// The jobs `id` runs after, ascending, with their results.
    func jobDependencies(of id: Int64) async throws -> [JobDependency]
    /// Puts the running attempt `attempt` of job `id`, which `owner` holds, back to wait for
    /// `jobs` too (those not ended yet), the attempt not counted (`JobDeferral.runAfter`); false
    /// when `owner` no longer holds it.
    func jobRunAfter(id: Int64, attempt: Int, owner: String, jobs: [Int64]) async throws -> Bool
    /// Up to `limit` jobs that run after `id` and wait for it (while it has not ended), ascending (no results).
    func jobDependents(of id: Int64, limit: Int) async throws -> [JobDependency]
    /// Up to `limit` jobs not ended yet (`waiting`, `available`, `running`) matching any of
    /// `matches`, ascending (no results).
    func jobPendingMatching(_ matches: [JobMatch], limit: Int) async throws -> [JobDependency]
    /// Dependents released and dependents ended `DEPENDENCY_FAILED`, fleet-wide, since the schema
    /// was created (counters that may run ahead by what rolled-back transactions did).
    func jobDependencyTotals() async throws -> DependencyTotals

    // Job control (operators; `docs/queue.md`, "Job control").
    /// Jobs matching `filter`, newest first, with ids below `before` (keyset pages), at most `limit`.
    func jobList(_ filter: JobFilter, before: Int64?, limit: Int) async throws -> [JobSummary]
    /// How many jobs match `filter`, counting no further than `limit`.
    func jobCount(_ filter: JobFilter, limit: Int) async throws -> Int
    /// A `dead` or `cancelled` job back to `available` at `runAt` (now when nil), errors kept,
    /// one more attempt allowed, unless `guard` (when the job is of its kinds) refuses it.
    func jobRetry(id: Int64, runAt: Date?, guard retryGuard: (any JobRetryGuard)?) async throws -> JobRetryResult
    /// Retries up to `limit` of the `dead` and `cancelled` jobs matching `filter`, oldest first,
    /// skipping rows others hold locked; returns how many. One short transaction per call.
    func jobRetryBatch(_ filter: JobFilter, limit: Int) async throws -> Int
    /// Looks at up to `limit` of the `dead` and `cancelled` jobs matching `filter` with ids above
    /// `after`, oldest first, skipping rows others hold locked, and retries those `guard` does not
    /// refuse (a dry run only asks). One short transaction per call.
    func jobRetryBatch(_ filter: JobFilter, after: Int64?, limit: Int, guard retryGuard: any JobRetryGuard, dryRun: Bool) async throws -> GuardedRetryBatch
    /// Deletes one finished job.
    func jobDiscard(id: Int64) async throws -> JobDiscardResult
    /// Deletes up to `limit` of the finished jobs matching `filter`; returns how many.
    func jobDiscardBatch(_ filter: JobFilter, limit: Int) async throws -> Int
    /// Pauses `target` (no claim takes its jobs); false if it already was.
    func queuePause(_ target: PauseTarget, by actor: String) async throws -> Bool
    /// Lifts the pause and wakes the workers; false if it was not paused.
    func queueResume(_ target: PauseTarget) async throws -> Bool
    func queuePauses() async throws -> [QueuePause]
    /// Appends an operator action to the audit trail.
    func auditRecord(actor: String, action: String, target: String, affected: Int) async throws
    /// The trail, newest first, with ids below `before`.
    func auditList(before: Int64?, limit: Int) async throws -> [AuditEntry]
    /// Dead jobs grouped by kind and latest error code, largest first (at most 200 groups).
    func jobDeadGroups() async throws -> [DeadJobGroup]
    /// Folds the count changes recorded since the last fold into the finished jobs' counts
    /// (`docs/queue.md`, "A large table"); returns how many it folded.
    func jobFoldCounts() async throws -> Int
    /// Deletes the finished jobs' counts that reached zero; returns how many.
    func jobCountsDropEmpty() async throws -> Int
    /// Each kind's queue now and what finished in the last 60 minutes (`QueueOverview`).
    func queueOverview() async throws -> QueueOverview

    // Limits (`docs/queue.md`, "Limits").
    /// Creates or replaces the rule for `limit.key`; with `keepingExisting`, only creates it.
    func limitSet(_ limit: ConcurrencyLimit, by actor: String, keepingExisting: Bool) async throws
    /// The limited service answered "too many" (429): halves the key's rate in force for a while
    /// (`ConcurrencyLimit.Throttle`); the rule as it now is, nil when no rule names the key.
    func limitThrottle(key: String) async throws -> ConcurrencyLimit?
    /// Removes a rule; false if there was none.
    func limitRemove(key: String) async throws -> Bool
    func limitList() async throws -> [ConcurrencyLimit]
    /// Per rule: running jobs and starts within its window, per key it limits (prefix rules: keys in use).
    func limitUsage() async throws -> [LimitUsage]
    /// One key's rule and use, its waiting jobs counted among the due jobs of `kind` (admission control).
    func limitLoad(key: String, kind: JobKind) async throws -> LimitLoad

    func workerRegister(_ worker: WorkerRecord) async throws
    func workerStop(id: String) async throws
    func workerDeleteStale(olderThan: Duration) async throws -> Int
    /// Takes back the running jobs of the workers whose session lock is free (`WorkerLock`): their
    /// process died, or lost its LISTEN connection. Each is marked stopped. Safe from any number of
    /// processes at once.
    func workerReapLost() async throws -> [LostWorker]
    /// Workers not stopped that heartbeated within `heartbeatWithin`, with the jobs each is running.
    func workerListLive(heartbeatWithin: Duration) async throws -> [LiveWorker]
}

extension QueueDriver {
    public func jobInsertMany(_ jobs: [NewJob]) async throws -> [EnqueuedJob] {
        try await jobInsertMany(jobs, announce: true)
    }

    /// Claims and returns the jobs (`jobClaim(_:start:)`, for a caller that starts them all at once).
    public func jobClaim(_ request: ClaimRequest) async throws -> ClaimResult {
        try await jobClaim(request) { _ in }
    }

    public func limitSet(_ limit: ConcurrencyLimit, by actor: String) async throws {
        try await limitSet(limit, by: actor, keepingExisting: false)
    }
}
