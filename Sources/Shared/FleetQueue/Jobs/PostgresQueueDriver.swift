import FleetPostgres
import FleetSupport
import Foundation
import Tracing

/// The queue's statements, behind its public types (`JobQueue`, `JobControl`, `WorkerRuntime`, the
/// maintenance services), which build it on their executor; nothing outside FleetQueue sees it.
/// One method per operation, named entity then verb, split by role across files (jobs and their
/// claim here; `+Workers`, `+Maintenance`, `+Dependencies`, `+Control`, `+Limits`). Each method is
/// one statement (two for a running job's cancel), run by its executor: a pool, or a connection
/// whose open transaction the statements join (a render request creates its job atomically with
/// its own rows). Every state change of a running job is a compare-and-set on "still running,
/// still this owner, still this attempt", so a worker that lost its lease cannot overwrite anything.
struct PostgresQueueDriver: Sendable {
    let executor: any PostgresExecutor
    /// Whether the last claim of limited kinds found a limit rule (a new driver assumes so).
    private let limitRulesSeen = LimitRulesSeen()

    init(executor: any PostgresExecutor) { self.executor = executor }

    // The guard "lease_owner = me" compares with a column of the unnested input, not with a
    // constant or a one-row CTE: the planner estimates those from statistics, and statistics
    // taken before the workers started say no row has an owner. Believing that, it scanned the
    // whole table once per outcome (21 s for 5,000 outcomes). Between jobs and the input the
    // only sound paths are the primary key or one hash join, whatever the statistics say.
    // "lease_owner = me" also implies the job is running (constraint jobs_lease_iff_running).

    /// A `SELECT` (column `sent`) that sends `fleet_jobs_finished` for the terminal rows of
    /// `source` (columns `id`, `state`, `finish_watched`, `limit_keys`) that someone waits for
    /// (`jobWatchFinish`) or that held a limited slot (workers of limited kinds claim again),
    /// chunked under the payload limit; one statement, few notifications, none for the rest. Callers filter their rows on `(SELECT sent FROM notified) >= 0`, which runs
    /// it once (an InitPlan, no join with the outcome's plan), and not at all when no row changed.
    static func notifyFinished(from source: String) -> String {
        """
        SELECT count(\(QueueChannel.finished.notifySQL(payload: "ids"))) AS sent FROM (
            SELECT string_agg(id::text, ',') AS ids FROM (
                SELECT id, (row_number() OVER () - 1) / \(QueueChannel.finishedIDsPerNotification) AS chunk
                FROM \(source) WHERE state IN ('completed', 'dead', 'cancelled') AND (finish_watched OR limit_keys IS NOT NULL)
            ) AS numbered GROUP BY chunk
        ) AS chunks
        """
    }

    /// Records outcomes; `$1` owner, then one array per outcome field.
    static let finishManySQL = """
        -- The arrays are read through a materialised row so that no plan knows their length: with
        -- it, every call got a custom plan (one outcome is cheaper than a generic guess), planned
        -- anew each time, 0.3 ms a render (docs/queue.md, "Plans").
        WITH input AS MATERIALIZED (
            SELECT $2::bigint[] AS ids, $3::integer[] AS attempts, $4::job_state[] AS states, $5::jsonb[] AS results,
                $6::text[] AS errors, $7::text[] AS codes, $8::float8[] AS retry_ins, $9::boolean[] AS refunds
        ),
        finished AS (
        UPDATE jobs SET
            state = o.state,
            result = o.result,
            attempt = jobs.attempt - o.refund::integer,
            run_at = CASE WHEN o.state = 'available' THEN now() + make_interval(secs => o.retry_in) ELSE jobs.run_at END,
            finished_at = CASE WHEN o.state = 'available' THEN NULL ELSE now() END,
            errors = CASE WHEN o.error IS NULL THEN jobs.errors ELSE jobs.errors || jsonb_build_array(jsonb_build_object(
                'attempt', jobs.attempt, 'at', now(), 'error', o.error, 'code', o.code, 'worker', $1::text)) END,
            last_error_code = CASE WHEN o.error IS NULL THEN jobs.last_error_code ELSE o.code END,
            lease_owner = NULL,
            lease_expires_at = NULL
        FROM input, unnest(input.ids, input.attempts, input.states, input.results, input.errors, input.codes, input.retry_ins,
                    input.refunds, array_fill($1::text, ARRAY[cardinality(input.ids)]))
            AS o(id, attempt, state, result, error, code, retry_in, refund, owner)
        WHERE jobs.id = o.id AND jobs.lease_owner = o.owner AND jobs.attempt = o.attempt
        RETURNING jobs.id, jobs.state, jobs.finish_watched, jobs.limit_keys
        ), notified AS (\(notifyFinished(from: "finished")))
        SELECT id FROM finished WHERE (SELECT sent FROM notified) >= 0
        """

    /// Ends one job its handler ended in its own transaction (`JobContext.end`); `$1` owner, `$2`
    /// job, `$3` attempt, `$4` state (`completed` or `dead`), `$5` result, `$6` error, `$7` its
    /// code. The batch's compare-and-set and notification for one job, without its arrays: through
    /// them a render's end, one job a transaction, took 0.50 ms against 0.31 ms (`docs/scaling.md`).
    /// The primary key finds the row whatever the statistics say, so the guard can compare with
    /// the parameters here.
    static let endOneSQL = """
        WITH ended AS (
        UPDATE jobs SET
            state = $4::job_state,
            result = $5::jsonb,
            finished_at = now(),
            errors = CASE WHEN $6::text IS NULL THEN errors ELSE errors || jsonb_build_array(jsonb_build_object(
                'attempt', attempt, 'at', now(), 'error', $6::text, 'code', $7::text, 'worker', $1::text)) END,
            last_error_code = CASE WHEN $6::text IS NULL THEN last_error_code ELSE $7::text END,
            lease_owner = NULL,
            lease_expires_at = NULL
        WHERE id = $2 AND lease_owner = $1 AND attempt = $3
        RETURNING id, state, finish_watched, limit_keys
        ), notified AS (\(notifyFinished(from: "ended")))
        SELECT id FROM ended WHERE (SELECT sent FROM notified) >= 0
        """

    /// Heartbeats the worker and renews its leases; `$1` owner, `$2` lease seconds, `$3` job ids.
    static let extendLeasesSQL = """
        WITH beat AS (UPDATE workers SET last_heartbeat_at = now() WHERE id = $1)
        UPDATE jobs SET lease_expires_at = now() + make_interval(secs => $2)
        FROM unnest($3::bigint[], array_fill($1::text, ARRAY[cardinality($3::bigint[])])) AS held(id, owner)
        WHERE jobs.id = held.id AND jobs.lease_owner = held.owner
        RETURNING jobs.id, jobs.cancel_requested_at IS NOT NULL AS cancel_requested
        """

    /// Inserts jobs in one statement; an idempotency key already present returns the first job.
    /// `announce`: wake the workers of their kinds (`QueueChannel.jobs`) within the statement.
    ///
    /// Without `announce`, no `fleet_jobs` notification: a caller whose transaction holds durable
    /// writes sends it after its commit (`PostgresPool.notify` says why). Runs in an `enqueue`
    /// span whose traceparent the jobs keep (`trace_parent`), for their workers to continue.
    func jobInsertMany(_ jobs: [NewJob], announce: Bool) async throws -> [EnqueuedJob] {
        guard !jobs.isEmpty else { return [] }
        return try await withSpan("enqueue", ofKind: .producer) { span in
            let traceParent = TracePropagation.traceParent()
            // Jobs that run after others take the dependencies' row locks in a transaction of
            // their own (`insertAfter`); every other batch stays one statement.
            let enqueued = jobs.contains(where: { !$0.after.isEmpty })
                ? try await executor.transactionRetryingConflicts { try await insertAfter(jobs, announce: announce, traceParent: traceParent, on: $0) }
                : try await insert(jobs, announce: announce, traceParent: traceParent, on: executor)
            if jobs.count == 1 {
                span.attributes[TraceAttribute.jobID] = enqueued[0].id
                span.attributes[TraceAttribute.kind] = jobs[0].kind.rawValue
            } else {
                span.attributes[TraceAttribute.jobCount] = jobs.count
            }
            return enqueued
        }
    }

    /// Inserts `jobs` in one statement on `executor`. `pending`: per job, how many of its
    /// dependencies are not completed (`lockDependencies`); nil when no job of the batch has any.
    func insert(
        _ jobs: [NewJob], pending: [Int]? = nil, announce: Bool, traceParent: String?, on executor: any PostgresExecutor
    ) async throws -> [EnqueuedJob] {
        // Keys repeated inside the batch would make ON CONFLICT touch a row twice: send each once.
        var unique: [NewJob] = []
        var uniquePending: [Int] = []
        var firstIndexOfKey: [String: Int] = [:]
        for (index, job) in jobs.enumerated() {
            if let key = job.idempotencyKey {
                if firstIndexOfKey[key] != nil { continue }
                firstIndexOfKey[key] = unique.count
            }
            unique.append(job)
            if let pending { uniquePending.append(pending[index]) }
        }
        // ON CONFLICT makes every row a speculative insertion (extra locking and WAL), so only
        // batches that carry keys pay for it.
        let keyed = unique.contains { $0.idempotencyKey != nil }
        let onConflict = keyed ? """
            ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL
                    DO UPDATE SET idempotency_key = EXCLUDED.idempotency_key
            """ : ""
        // Likewise only batches with limit keys name the column: one more array otherwise for nothing.
        let limited = unique.contains { !$0.limitKeys.isEmpty }
        // And only batches with callbacks name theirs.
        let calledBack = unique.contains { $0.callbackURL != nil }
        var parameters: [(any PostgresEncodable)?] = [
            PostgresArray(unique.map(\.kind.rawValue)), PostgresArray(unique.map(\.queue)),
            PostgresArray(unique.map(\.priority)), PostgresArray(unique.map(\.maxAttempts)),
            PostgresArray(unique.map(\.delay.seconds)), PostgresArray(unique.map(\.payload)),
            PostgresArray(unique.map(\.idempotencyKey)),
        ]
        var (extraColumns, extraValues, extraInputs, extraNames) = ("", "", "", "")
        if limited {
            // Keys are joined by spaces (they cannot hold one): unnest would flatten an array of arrays.
            parameters.append(PostgresArray(unique.map { $0.limitKeys.joined(separator: " ") }))
            extraColumns += ", limit_keys"; extraValues += ", string_to_array(nullif(limit_keys, ''), ' ')"
            extraInputs += ", $\(parameters.count)::text[]"; extraNames += ", limit_keys"
        }
        if calledBack {
            parameters.append(PostgresArray(unique.map(\.callbackURL)))
            extraColumns += ", callback_url"; extraValues += ", callback_url"
            extraInputs += ", $\(parameters.count)::text[]"; extraNames += ", callback_url"
        }
        // And only batches with dependencies name theirs: the ids (joined by spaces, as the
        // limit keys), the count still pending, and the state that count makes.
        if let pending {
            parameters.append(PostgresArray(unique.map { $0.after.map(String.init).joined(separator: " ") }))
            extraColumns += ", depends_on"; extraValues += ", string_to_array(nullif(depends_on, ''), ' ')::bigint[]"
            extraInputs += ", $\(parameters.count)::text[]"; extraNames += ", depends_on"
            parameters.append(PostgresArray(uniquePending))
            extraColumns += ", waiting_on, state"
            extraValues += ", waiting_on, CASE WHEN waiting_on > 0 THEN 'waiting'::job_state ELSE 'available'::job_state END"
            extraInputs += ", $\(parameters.count)::integer[]"; extraNames += ", waiting_on"
        }
        // And only traced batches (tracing on) name the trace's: one value for the whole batch,
        // or one per job when some jobs carry their own.
        if unique.contains(where: { $0.traceParent != nil }) {
            parameters.append(PostgresArray(unique.map { $0.traceParent ?? traceParent }))
            extraColumns += ", trace_parent"; extraValues += ", trace_parent"
            extraInputs += ", $\(parameters.count)::text[]"; extraNames += ", trace_parent"
        } else if let traceParent {
            parameters.append(traceParent)
            extraColumns += ", trace_parent"; extraValues += ", $\(parameters.count)::text"
        }
        // created_at is the statement's start, not the transaction's (`now()`): a render's job is
        // inserted late in its request's transaction, and its queue wait must not start before
        // the enqueue did.
        let rows = try await executor.query("""
            WITH inserted AS (
                INSERT INTO jobs (kind, queue, priority, max_attempts, run_at, payload, idempotency_key, created_at\(extraColumns))
                SELECT kind, queue, priority, max_attempts, now() + make_interval(secs => delay), payload, idempotency_key,
                    statement_timestamp()\(extraValues)
                FROM unnest($1::text[], $2::text[], $3::smallint[], $4::integer[], $5::float8[], $6::jsonb[], $7::text[]\(extraInputs))
                    AS input(kind, queue, priority, max_attempts, delay, payload, idempotency_key\(extraNames))
                \(onConflict)
                RETURNING id, idempotency_key, kind, (xmax = 0) AS is_new
            ), notified AS (
                SELECT count(*) AS kinds FROM (
                    SELECT \(QueueChannel.jobs.notifySQL(payload: "kind")) FROM (SELECT DISTINCT kind FROM inserted WHERE is_new AND \(announce)) AS k
                ) AS n
            )
            SELECT id, idempotency_key, is_new FROM inserted, notified WHERE notified.kinds >= 0
            """, parameters).rows
        // Keyed rows match by key; new unkeyed rows got ascending ids in input order.
        var byKey: [String: EnqueuedJob] = [:]
        var unkeyed: [EnqueuedJob] = []
        for row in rows {
            let job = EnqueuedJob(id: try row.int64("id"), isNew: try row.bool("is_new"))
            if let key = row["idempotency_key"] { byKey[key] = job } else { unkeyed.append(job) }
        }
        unkeyed.sort { $0.id < $1.id }
        var nextUnkeyed = unkeyed.makeIterator()
        var results: [EnqueuedJob] = []
        var seenKeys: Set<String> = []
        for job in jobs {
            if let key = job.idempotencyKey {
                guard let found = byKey[key] else { throw QueueError.internalMismatch("no row returned for key \(key)") }
                // A key repeated within the batch is a duplicate of its first occurrence.
                results.append(seenKeys.insert(key).inserted ? found : EnqueuedJob(id: found.id, isNew: false))
            } else {
                guard let found = nextUnkeyed.next() else { throw QueueError.internalMismatch("fewer rows than jobs") }
                results.append(found)
            }
        }
        return results
    }

    /// Leases up to `slots[kind]` due jobs of each kind, priority then run-at order; the kinds in
    /// `request.limitedKinds` within the fleet-wide limits (`ConcurrencyLimit`): whether a rule
    /// exists is the driver's to know. `start` gets the jobs as each statement returns them (the
    /// kinds without limits first, before any transaction under the rules' lock, so that none of
    /// them waits for it); the result holds all of them too, and the kinds a limit held back.
    func jobClaim(_ request: ClaimRequest, start: ([ClaimedJob]) -> Void) async throws -> ClaimResult {
        let wanted = request.slots.filter { $0.value > 0 }
        let limited = wanted.filter { request.limitedKinds.contains($0.key) }
        guard !wanted.isEmpty else { return ClaimResult(jobs: []) }
        // With no rule at the last look, one statement claims every kind, the limited ones with
        // the others: limits cost nothing where no rule asks for them (a transaction of four
        // statements cost each render about 1.5 ms, and a second statement per wake cost the
        // drain a tenth, docs/benchmarks.md). It claims nothing if a rule has appeared since.
        if limited.isEmpty || !limitRulesSeen.value.load(ordering: .relaxed),
           let jobs = try await claim(wanted, request, on: executor, unlessLimitsExist: !limited.isEmpty) {
            let claimed = jobs.sorted(by: ClaimedJob.inClaimOrder)
            start(claimed)
            return ClaimResult(jobs: claimed)
        }
        // Under limits, the kinds without them are claimed and started first: the claim under
        // limits is a transaction of several statements (the rules locked, then the claim), and
        // a job of another kind must not wait for it (the drill's noop jobs did: enqueue-to-start
        // p50 2.0 ms before limits, 3.2 ms after, docs/benchmarks.md).
        let plain = wanted.filter { !request.limitedKinds.contains($0.key) }
        let plainJobs = plain.isEmpty ? [] : try await claim(plain, request, on: executor) ?? []
        if !plainJobs.isEmpty { start(plainJobs.sorted(by: ClaimedJob.inClaimOrder)) }
        var result = try await claimWithinLimits(limited, request)
        limitRulesSeen.value.store(result.limitsExist, ordering: .relaxed)
        if !result.jobs.isEmpty { start(result.jobs) }
        result.jobs += plainJobs
        result.jobs.sort(by: ClaimedJob.inClaimOrder)
        return result
    }

    /// The claim of kinds without limits: one statement. `unlessLimitsExist`: it claims nothing
    /// and returns nil if any limit rule exists (in the statement's snapshot; a rule committed
    /// after it holds from the next claim on, as it would had this claim come first). When it
    /// claimed nothing, a second statement asks whether a rule is why.
    func claim(
        _ slots: [JobKind: Int], _ request: ClaimRequest, on executor: any PostgresExecutor, unlessLimitsExist: Bool = false
    ) async throws -> [ClaimedJob]? {
        let wanted = slots.sorted { $0.key < $1.key }
        let kinds = wanted.map(\.key)
        let (seeks, startedAt) = request.frontiers?.seeks(for: kinds) ?? (kinds.map { _ in .start }, 0)
        let rows = try await executor.query(Self.claimSQL(guarded: unlessLimitsExist, noFlushWait: !executor.joinsCallerTransaction), [
            PostgresArray(kinds.map(\.rawValue)), PostgresArray(wanted.map(\.value)),
            request.owner, request.lease.seconds, request.queues.map { PostgresArray($0) },
            PostgresArray(seeks.map(\.priority)), PostgresArray(seeks.map(\.runAt)),
        ]).rows
        if let frontiers = request.frontiers {
            var newest: [JobKind: ClaimFrontier.Seek] = [:]
            for row in rows {
                let seek = ClaimFrontier.Seek(priority: try row.int("priority"), runAt: try row.double("run_at"))
                let kind = JobKind(rawValue: try row.string("kind"))
                if newest[kind].map({ seek.isPast($0) }) ?? true { newest[kind] = seek }
            }
            frontiers.claimed(kinds, from: seeks, startedAt: startedAt, newest: newest)
        }
        // Nothing claimed under the guard: because a rule exists, or because nothing was due.
        // Asked only then, so that a claim that takes jobs pays nothing for the answer.
        if unlessLimitsExist, rows.isEmpty,
           try await executor.query("SELECT EXISTS (SELECT 1 FROM queue_limits) AS held").rows[0].bool("held") {
            return nil
        }
        return try rows.map(ClaimedJob.init(row:))
    }

    /// The one-statement claim ($1 kinds, $2 slots per kind, $3 owner, $4 lease in seconds,
    /// $5 queues or NULL, $6 and $7 each kind's `ClaimFrontier.Seek`: priority, run-at in epoch
    /// seconds). `guarded`: it claims nothing if a limit rule exists. `noFlushWait`:
    /// its commit does not wait for the disk (not inside a caller's transaction).
    static func claimSQL(guarded: Bool, noFlushWait: Bool) -> String {
        claimStatements[guarded ? 1 : 0][noFlushWait ? 1 : 0]
    }

    /// The four forms of the claim, written once: not a 3 kB string built for every claim.
    private static let claimStatements = [false, true].map { guarded in
        [false, true].map { noFlushWait in makeClaimSQL(guarded: guarded, noFlushWait: noFlushWait) }
    }

    /// SQL: the row's queue is not among `pausedQueues` (a text[] expression). Not
    /// `queue <> ALL (…)`: to the planner, one queue in the table makes that 0 rows
    /// (1 - 1/n_distinct), and it sorted a seq scan per claim instead of walking the claim index;
    /// `@>` is estimated at 0.5 % (docs/queue.md). The `cardinality` test first makes the whole
    /// test look dearer than `state = 'available'`, so a seq scan (a plan made on a nearly empty
    /// table) checks the state first and builds no array for the rows that are not available:
    /// 0.07 ms per claim on a table of 300 finished jobs.
    static func queueNotPaused(pausedQueues: String) -> String {
        "(cardinality(\(pausedQueues)) = 0 OR NOT (\(pausedQueues) @> ARRAY[queue]))"
    }

    private static func makeClaimSQL(guarded: Bool, noFlushWait: Bool) -> String {
        // The guard is a filter, not a row returned with the jobs: returning `held` with them
        // took a CTE around the update whose rows were copied once more (1 ms per 1,000 jobs).
        """
        WITH
        -- An operator's pause is a row: every claimer honours it from its next claim on. Read
        -- once as two arrays: as subqueries in the scan they made PostgreSQL plan the claim
        -- anew on every call (custom plans), which cost the drain about a fifth.
        paused AS MATERIALIZED (
            SELECT coalesce(array_agg(name) FILTER (WHERE scope = 'queue'), '{}') AS queues,
                   coalesce(array_agg(name) FILTER (WHERE scope = 'kind'), '{}') AS kinds
            FROM queue_pauses
        ),
        -- The wanted kinds and slots through a materialised row, as in `finishManySQL`: known to
        -- the planner, they made every claim a custom plan, planned anew each time.
        asked AS MATERIALIZED (
            SELECT $1::text[] AS kinds, $2::integer[] AS slots, $6::integer[] AS from_priorities, $7::float8[] AS from_run_ats
        ),
        picked AS MATERIALIZED (
            SELECT j.id
            FROM paused, asked, unnest(asked.kinds, asked.slots, asked.from_priorities, asked.from_run_ats)
                AS wanted(kind, slots, from_priority, from_run_at)
            CROSS JOIN LATERAL (
                SELECT id FROM jobs
                -- The row comparison is where the index scan starts (ClaimFrontier): past the
                -- entries earlier claims left, which a held snapshot keeps from being skipped.
                WHERE state = 'available' AND kind = wanted.kind AND run_at <= now()
                  AND (priority, run_at) >= (wanted.from_priority, to_timestamp(wanted.from_run_at))
                  AND ($5::text[] IS NULL OR queue = ANY($5::text[]))
                  AND \(queueNotPaused(pausedQueues: "paused.queues"))
                ORDER BY priority, run_at, id
                LIMIT wanted.slots
                FOR UPDATE SKIP LOCKED
            ) AS j
            WHERE wanted.kind <> ALL (paused.kinds)
              \(guarded ? "AND NOT EXISTS (SELECT 1 FROM queue_limits)" : "")
        )
        -- started_at is the clock when the row is claimed, after the statement's snapshot, not
        -- `now()` (its transaction's start, which can come before the commit that released a
        -- dependent this claim then sees): a job never looks started before its dependencies ended.
        UPDATE jobs SET state = 'running', attempt = jobs.attempt + 1, lease_owner = $3,
            lease_expires_at = now() + make_interval(secs => $4), started_at = clock_timestamp()
        -- Joined to the picked ids unnested from an array, which the planner counts as 10 rows: it
        -- then walks the primary key on a large table (joined to `picked` itself, the rows were
        -- estimated at a tenth of the table, LIMIT of a column, and it hashed a seq scan of the
        -- whole table on every claim), and hashes the ids on a plan made while the table was
        -- nearly empty (`id = ANY (ids)` searched the array once per row of the table: a
        -- 1,000-job claim on 2,000 jobs took 16 ms instead of 9, docs/queue.md, "Plans").
        FROM unnest(ARRAY(SELECT id FROM picked)) AS claimed(id)
        -- The claim's commit need not wait for the disk: if a crash loses it, the job is simply
        -- claimed again, and the completion (which does wait) of the lost claim is refused.
        -- Inside a caller's transaction that setting would cover the caller's writes too.
        \(noFlushWait ? ", (SELECT set_config('synchronous_commit', 'off', true)) AS no_flush_wait" : "")
        WHERE jobs.id = claimed.id
        RETURNING jobs.id, jobs.kind, jobs.queue, jobs.priority, jobs.attempt, jobs.max_attempts, jobs.payload,
            extract(epoch FROM jobs.created_at) AS created_at, jobs.trace_parent, extract(epoch FROM jobs.run_at)::float8 AS run_at
        """
    }

    /// Records outcomes of attempts `owner` still holds; returns the ids it applied.
    func jobFinishMany(owner: String, outcomes: [JobOutcome]) async throws -> Set<Int64> {
        guard !outcomes.isEmpty else { return [] }
        var states: [String] = [], results: [String?] = [], errors: [String?] = [], codes: [String?] = []
        var retryIn: [Double] = [], refunds: [Bool] = []
        for outcome in outcomes {
            var state = "available", result: String? = nil, error: String? = nil, code: String? = nil
            var delay = 0.0, refund = false
            switch outcome.kind {
            case .completed(let value): state = "completed"; result = value
            case .retry(let message, let errorCode, let wait): error = message; code = errorCode?.rawValue; delay = wait.seconds
            case .dead(let message, let errorCode): state = "dead"; error = message; code = errorCode?.rawValue
            case .cancelled: state = "cancelled"; error = "cancelled on request"; code = JobErrorCode.cancelled.rawValue
            case .returned: refund = true
            case .deferred(let message, let errorCode, let wait): error = message; code = errorCode?.rawValue; delay = wait.seconds; refund = true
            case .runAfter: throw QueueError.internalMismatch("a run-after outcome is written by jobRunAfter, not in a batch")
            }
            states.append(state); results.append(result); errors.append(error); codes.append(code)
            retryIn.append(delay); refunds.append(refund)
        }
        let parameters: [(any PostgresEncodable)?] = [
            owner, PostgresArray(outcomes.map(\.jobID)), PostgresArray(outcomes.map(\.attempt)),
            PostgresArray(states), PostgresArray(results), PostgresArray(errors), PostgresArray(codes),
            PostgresArray(retryIn), PostgresArray(refunds),
        ]
        // Idempotent (compare-and-set), so a lost link is simply retried.
        let rows = try await executor.withRetry { connection in
            try await connection.query(Self.finishManySQL, parameters).rows
        }
        return Set(try rows.map { try $0.int64("id") })
    }

    /// Ends job `id` as `ending` if `owner` still holds its `attempt` (`endOneSQL`); false when
    /// it no longer does, and then nothing was written.
    func jobEnd(owner: String, id: Int64, attempt: Int, _ ending: JobEnding) async throws -> Bool {
        let (state, result, error, code): (JobState, String?, String?, String?) = switch ending {
        case .completed(let value): (.completed, value?.jsonText, nil, nil)
        case .dead(let code, let message): (.dead, nil, message, code.rawValue)
        }
        return try await !executor.withRetry { connection in
            try await connection.query(Self.endOneSQL, [owner, id, attempt, state.rawValue, result, error, code]).rows
        }.isEmpty
    }

    /// Renews the leases `owner` still holds among `ids` and heartbeats the worker row.
    func jobExtendLeases(owner: String, ids: [Int64], lease: Duration) async throws -> LeaseRenewal {
        let rows = try await executor.withRetry { connection in
            try await connection.query(Self.extendLeasesSQL, [owner, lease.seconds, PostgresArray(ids)]).rows
        }
        var renewal = LeaseRenewal(kept: [], cancelRequested: [])
        for row in rows {
            let id = try row.int64("id")
            renewal.kept.insert(id)
            if try row.bool("cancel_requested") { renewal.cancelRequested.insert(id) }
        }
        return renewal
    }

    /// Marks the job as waited for: its end then notifies `fleet_jobs_finished` (jobs nobody waits
    /// for end without a notification, but those holding a limited slot). A write, so that it is race-free with the job's end: an ending
    /// statement that started before this commits updates the row this wrote (PostgreSQL
    /// re-reads it), so it sees the mark and notifies; one that committed first left a terminal
    /// state for the waiter's next read. A job already ended is not written: there is nothing
    /// left to announce (an ending in flight is waited for, then its row re-checked, so it too
    /// is left alone and the read sees it).
    ///
    /// The mark holds the row's lock until it commits, and a claim meanwhile passes over the job
    /// (`SKIP LOCKED`): when the job is available its kind's workers are told again after the
    /// commit, or a worker that found nothing else would wait for its poll (a `wait` sent right
    /// after its `enqueue` did, under load).
    func jobWatchFinish(id: Int64) async throws {
        let marked = try await executor.query("""
            UPDATE jobs SET finish_watched = true
            WHERE id = $1 AND NOT finish_watched AND state IN ('waiting', 'available', 'running')
            RETURNING kind, state
            """, [id]).rows
        if let row = marked.first, try row.string("state") == JobState.available.rawValue {
            try await executor.announce(JobKind(rawValue: try row.string("kind")), on: QueueChannel.jobs)
        }
    }

    /// Cancels a queued job, or asks the worker running it to stop.
    func jobCancel(id: Int64) async throws -> CancelResult {
        try await executor.withConnection { connection in
            let rows = try await connection.query("""
                WITH target AS (SELECT id, state AS previous FROM jobs WHERE id = $1 FOR UPDATE),
                changed AS (
                    UPDATE jobs SET
                        state = CASE WHEN jobs.state IN ('waiting', 'available') THEN 'cancelled'::job_state ELSE jobs.state END,
                        finished_at = CASE WHEN jobs.state IN ('waiting', 'available') THEN now() ELSE jobs.finished_at END,
                        waiting_on = 0,
                        cancel_requested_at = coalesce(jobs.cancel_requested_at, now())
                    FROM target WHERE jobs.id = target.id AND jobs.state IN ('waiting', 'available', 'running')
                    RETURNING jobs.id, jobs.state, jobs.finish_watched, jobs.limit_keys
                ),
                notified AS (\(Self.notifyFinished(from: "changed")))
                SELECT target.previous, jobs.lease_owner FROM target JOIN jobs ON jobs.id = target.id
                WHERE (SELECT sent FROM notified) >= 0
                """, [id]).rows
            guard let row = rows.first else { return .notFound }
            switch JobState(rawValue: try row.string("previous")) {
            case .waiting, .available: return .cancelled
            case .running:
                let owner = row["lease_owner"]
                try await connection.announce(.cancel(jobID: id, owner: owner), on: QueueChannel.control)
                return .requested(owner: owner)
            case let state?: return .alreadyFinished(state)
            case nil: throw QueueError.internalMismatch("unknown job state")
            }
        }
    }

    /// The states of those of `ids` that exist.
    func jobStates(ids: [Int64]) async throws -> [Int64: JobState] {
        var states: [Int64: JobState] = [:]
        for row in try await executor.query("SELECT id, state::text AS state FROM jobs WHERE id = ANY ($1::bigint[])", [PostgresArray(ids)]).rows {
            guard let state = JobState(rawValue: try row.string("state")) else { throw QueueError.internalMismatch("unknown job state") }
            states[try row.int64("id")] = state
        }
        return states
    }

    func jobGet(id: Int64) async throws -> JobRecord? {
        guard let row = try await executor.query("""
            SELECT id, kind, queue, state, priority, attempt, max_attempts, payload, result, errors, idempotency_key,
                lease_owner, cancel_requested_at IS NOT NULL AS cancel_requested,
                extract(epoch FROM created_at) AS created_at, extract(epoch FROM run_at) AS run_at,
                extract(epoch FROM started_at) AS started_at, extract(epoch FROM finished_at) AS finished_at,
                array_to_string(depends_on, ' ') AS depends_on,
                (SELECT string_agg(d.id::text, ' ' ORDER BY d.id) FROM jobs d
                 WHERE d.id = ANY (jobs.depends_on) AND d.state <> 'completed') AS waiting_on
            FROM jobs WHERE id = $1
            """, [id]).rows.first else { return nil }
        guard let state = JobState(rawValue: try row.string("state")) else {
            throw PostgresError.decoding(column: "state", value: row["state"], expected: "job_state")
        }
        let errors = try PostgresJSON.makeDecoder().decode([JobAttemptError].self, from: Data(try row.string("errors").utf8))
        var record = JobRecord(
            id: try row.int64("id"), kind: JobKind(rawValue: try row.string("kind")), queue: try row.string("queue"),
            state: state, priority: try row.int("priority"), attempt: try row.int("attempt"),
            maxAttempts: try row.int("max_attempts"), payload: try row.string("payload"), result: row["result"],
            errors: errors, idempotencyKey: row["idempotency_key"], leaseOwner: row["lease_owner"],
            cancelRequested: try row.bool("cancel_requested"), createdAt: try row.date("created_at"),
            runAt: try row.date("run_at"), startedAt: try row.optionalDate("started_at"),
            finishedAt: try row.optionalDate("finished_at"))
        record.dependsOn = try Self.ids(row, "depends_on")
        record.waitingOn = try Self.ids(row, "waiting_on")
        return record
    }

    /// A column of ids joined by spaces (NULL: none).
    static func ids(_ row: PostgresRow, _ column: String) throws -> [Int64] {
        guard let text = row[column], !text.isEmpty else { return [] }
        return try text.split(separator: " ").map { part in
            guard let id = Int64(part) else { throw PostgresError.decoding(column: column, value: text, expected: "job ids") }
            return id
        }
    }

    /// Per kind: jobs due, scheduled, running, waiting for a retry, finished within `window`, and the oldest due job's age.
    ///
    /// A cost that follows the queue and the window, not the table: the open jobs from the
    /// partial indexes (`openJobCounts`), the finished ones from the counts per minute
    /// (`job_counts` and the changes not folded yet) for the whole minutes of the window, and from
    /// `jobs_finished_idx` for the part of its first minute inside it: exact, whatever the window
    /// holds. A kind with neither open jobs nor jobs finished in the window has no line.
    func jobStats(window: Duration) async throws -> [KindStats] {
        let rows = try await executor.query("""
            WITH \(Self.openJobCounts), counted AS (
                SELECT kind, state, code, n FROM job_counts
                WHERE minute >= date_trunc('minute', now() - make_interval(secs => $1)) + interval '1 minute'
                UNION ALL
                SELECT kind, state, code, delta FROM job_count_changes
                WHERE minute >= date_trunc('minute', now() - make_interval(secs => $1)) + interval '1 minute'
                UNION ALL
                SELECT kind, state, last_error_code, 1 FROM jobs
                WHERE finished_at > now() - make_interval(secs => $1)
                  AND finished_at < date_trunc('minute', now() - make_interval(secs => $1)) + interval '1 minute'
                  AND state IN ('completed', 'dead', 'cancelled')
            ), finished AS (
                SELECT kind,
                    coalesce(sum(n) FILTER (WHERE state = 'completed'), 0)::bigint AS completed,
                    coalesce(sum(n) FILTER (WHERE state = 'dead'), 0)::bigint AS dead,
                    coalesce(sum(n) FILTER (WHERE state = 'cancelled'), 0)::bigint AS cancelled,
                    coalesce(sum(n) FILTER (WHERE state = 'cancelled' AND code = '\(JobErrorCode.dependencyFailed)'), 0)::bigint AS dependency_failed
                FROM counted GROUP BY kind HAVING sum(n) > 0
            )
            SELECT k.kind, coalesce(q.due, 0) AS due, coalesce(q.scheduled, 0) AS scheduled, coalesce(r.running, 0) AS running,
                coalesce(rt.retrying, 0) AS retrying, coalesce(w.waiting, 0) AS waiting, coalesce(f.completed, 0) AS completed,
                coalesce(f.dependency_failed, 0) AS dependency_failed, coalesce(f.dead, 0) AS dead,
                coalesce(f.cancelled, 0) AS cancelled, q.lag AS oldest_due_age
            FROM (SELECT kind FROM queued UNION SELECT kind FROM waiting UNION SELECT kind FROM running UNION SELECT kind FROM finished) k
            LEFT JOIN queued q USING (kind) LEFT JOIN retrying rt USING (kind) LEFT JOIN waiting w USING (kind)
            LEFT JOIN running r USING (kind) LEFT JOIN finished f USING (kind)
            ORDER BY k.kind
            """, [window.seconds]).rows
        return try rows.map { row in
            KindStats(
                kind: JobKind(rawValue: try row.string("kind")), due: try row.int("due"), scheduled: try row.int("scheduled"),
                running: try row.int("running"), retrying: try row.int("retrying"), waiting: try row.int("waiting"),
                completed: try row.int("completed"), dependencyFailed: try row.int("dependency_failed"),
                dead: try row.int("dead"), cancelled: try row.int("cancelled"),
                oldestDueAge: row["oldest_due_age"] == nil ? nil : .milliseconds(Int64(try row.double("oldest_due_age") * 1000)))
        }
    }
}

extension ClaimedJob {
    /// The order a claim hands its jobs out in: by priority, then by id (enqueue order).
    fileprivate static func inClaimOrder(_ a: ClaimedJob, _ b: ClaimedJob) -> Bool {
        (a.priority, a.id) < (b.priority, b.id)
    }
}

extension PostgresQueueDriver {
    func jobInsertMany(_ jobs: [NewJob]) async throws -> [EnqueuedJob] {
        try await jobInsertMany(jobs, announce: true)
    }

    /// Claims and returns the jobs (`jobClaim(_:start:)`, for a caller that starts them all at once).
    func jobClaim(_ request: ClaimRequest) async throws -> ClaimResult {
        try await jobClaim(request) { _ in }
    }

    func limitSet(_ limit: ConcurrencyLimit, by actor: String) async throws {
        try await limitSet(limit, by: actor, keepingExisting: false)
    }
}
