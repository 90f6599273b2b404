import FleetPostgres
import FleetSupport
import Tracing

/// Dependencies (`docs/queue.md`, "Dependencies"): enqueueing jobs that run after others, a
/// graph of them, and reading what they ran after. Releasing and failing dependents is the
/// triggers' (migration 18), in the statement that ends the dependency.
extension PostgresQueueDriver {
    /// Locks the dependencies' rows in id order until the transaction ends (so none can end
    /// meanwhile: whoever ends one later finds the dependent inserted, and its trigger settles it)
    /// and marks those not ended yet as having dependents; answers each found job's state, read
    /// after the lock (the newest, committed before the lock was granted). A claim passes over a
    /// locked job (`SKIP LOCKED`), so the kinds of the available ones are announced at the
    /// commit that releases them: their workers claim again instead of waiting for their poll.
    static let lockDependenciesSQL = """
        WITH locked AS MATERIALIZED (
            SELECT id, state, kind FROM jobs WHERE id = ANY ($1::bigint[]) ORDER BY id FOR NO KEY UPDATE
        ),
        marked AS (
            UPDATE jobs SET has_dependents = true FROM locked
            WHERE jobs.id = locked.id AND locked.state IN ('waiting', 'available', 'running') AND NOT jobs.has_dependents
            RETURNING jobs.id
        ),
        announced AS (
            SELECT count(\(QueueChannel.jobs.notifySQL(payload: "kind"))) AS sent FROM (SELECT DISTINCT kind FROM locked WHERE state = 'available') AS kinds
        )
        SELECT id, state FROM locked WHERE (SELECT count(*) FROM marked) >= 0 AND (SELECT sent FROM announced) >= 0
        """

    /// Inserts edges of `job_dependencies` ($1 dependencies, $2 their dependents).
    static let linkDependenciesSQL = """
        INSERT INTO job_dependencies (depends_on, job_id) SELECT * FROM unnest($1::bigint[], $2::bigint[]) ON CONFLICT DO NOTHING
        """

    /// Inserts jobs of which some run after others, within the caller's transaction on
    /// `connection`. A job whose idempotency key is taken answers that job without looking at
    /// its dependencies again (they may have ended since it was enqueued).
    func insertAfter(_ jobs: [NewJob], announce: Bool, traceParent: String?, on connection: PostgresConnection) async throws -> [EnqueuedJob] {
        let keys = jobs.compactMap(\.idempotencyKey)
        var existing: [String: Int64] = [:]
        if !keys.isEmpty {
            for row in try await connection.query(
                "SELECT id, idempotency_key FROM jobs WHERE idempotency_key = ANY ($1::text[])", [PostgresArray(keys)]).rows {
                existing[try row.string("idempotency_key")] = try row.int64("id")
            }
        }
        let fresh = jobs.filter { $0.idempotencyKey.map { existing[$0] == nil } ?? true }.map { job in
            // Each dependency once: the trigger counts one completion per dependency.
            var job = job
            job.after = Set(job.after).sorted()
            return job
        }
        let wanted = Set(fresh.flatMap(\.after)).sorted()
        var states: [Int64: JobState] = [:]
        if !wanted.isEmpty {
            for row in try await connection.query(Self.lockDependenciesSQL, [PostgresArray(wanted)]).rows {
                guard let state = JobState(rawValue: try row.string("state")) else { throw QueueError.internalMismatch("unknown job state") }
                states[try row.int64("id")] = state
            }
        }
        let missing = wanted.filter { states[$0] == nil }
        guard missing.isEmpty else { throw QueueError.unknownDependencies(missing) }
        if let failed = wanted.first(where: { states[$0] == .dead || states[$0] == .cancelled }) {
            throw QueueError.failedDependency(id: failed, state: states[failed]!)
        }
        let pending = fresh.map { job in job.after.filter { states[$0] != .completed } }
        let enqueued = try await insert(fresh, pending: pending.map(\.count), announce: announce, traceParent: traceParent, on: connection)
        // The edges the dependencies' trigger settles: one per dependency not completed, of each new job.
        var edges: (dependencies: [Int64], jobs: [Int64]) = ([], [])
        for (job, dependencies) in zip(enqueued, pending) where job.isNew {
            edges.dependencies += dependencies
            edges.jobs += Array(repeating: job.id, count: dependencies.count)
        }
        if !edges.jobs.isEmpty {
            try await connection.query(Self.linkDependenciesSQL, [PostgresArray(edges.dependencies), PostgresArray(edges.jobs)])
        }
        var inserted = enqueued.makeIterator()
        return try jobs.map { job in
            if let key = job.idempotencyKey, let id = existing[key] { return EnqueuedJob(id: id, isNew: false) }
            guard let next = inserted.next() else { throw QueueError.internalMismatch("fewer rows than jobs") }
            return next
        }
    }

    /// Inserts a graph's jobs, each after the jobs it names, in one transaction; in node order.
    func jobInsertGraph(_ graph: JobGraph, announce: Bool) async throws -> [EnqueuedJob] {
        try await withSpan("enqueue graph", ofKind: .producer) { span in
            span.attributes[TraceAttribute.jobCount] = graph.nodes.count
            let traceParent = TracePropagation.traceParent()
            let enqueued = try await executor.transactionRetryingConflicts { connection in
                var enqueued = [EnqueuedJob?](repeating: nil, count: graph.nodes.count)
                // Layer by layer, each node after the ids its dependencies got in earlier layers.
                for layer in graph.layers {
                    let jobs = layer.map { index in
                        var job = graph.nodes[index].job
                        job.after += graph.localDependencies[index].map { enqueued[$0]!.id }
                        return job
                    }
                    let answered = jobs.contains(where: { !$0.after.isEmpty })
                        ? try await insertAfter(jobs, announce: announce, traceParent: traceParent, on: connection)
                        : try await insert(jobs, announce: announce, traceParent: traceParent, on: connection)
                    for (index, job) in zip(layer, answered) { enqueued[index] = job }
                }
                let all = enqueued.map { $0! }
                // Enqueued again under its key, a graph answers its first jobs; a key that named
                // some of these jobs and not others named another graph.
                if Set(all.map(\.isNew)).count > 1 {
                    throw QueueError.invalidGraph("its idempotency key already names a graph of other jobs")
                }
                return all
            }
            return enqueued
        }
    }

    /// The running attempt back to the queue, after more jobs ($1 id, $2 owner, $3 attempt, $4 the
    /// jobs, added to `depends_on`, $5 how many of them are not ended): `waiting` on those, or `available` at once when
    /// none is left (they ended between the handler's look and the lock); the attempt refunded.
    /// Its kind comes back for the announcement an available job needs.
    static let runAfterSQL = """
        UPDATE jobs SET
            state = CASE WHEN $5 > 0 THEN 'waiting'::job_state ELSE 'available'::job_state END,
            waiting_on = $5,
            depends_on = ARRAY(SELECT DISTINCT d FROM unnest(jobs.depends_on || $4::bigint[]) AS d ORDER BY d),
            attempt = jobs.attempt - 1,
            run_at = now(),
            lease_owner = NULL,
            lease_expires_at = NULL
        WHERE id = $1 AND lease_owner = $2 AND attempt = $3
        RETURNING kind
        """

    /// Puts the running attempt `attempt` of job `id`, which `owner` holds, back to wait for
    /// `jobs` too (those not ended yet), the attempt not counted (`JobDeferral.runAfter`); false
    /// when `owner` no longer holds it.
    func jobRunAfter(id: Int64, attempt: Int, owner: String, jobs: [Int64]) async throws -> Bool {
        let wanted = Set(jobs).subtracting([id]).sorted()
        return try await executor.transactionRetryingConflicts { connection in
            // Locked as an enqueue after them locks them: none can end unseen before the commit.
            // Those that failed are left out: nothing is waited for from them, and an operator's
            // retry of this job, which counts its dependencies again, must not wait for them.
            var kept: [Int64] = [], pending: [Int64] = []
            if !wanted.isEmpty {
                for row in try await connection.query(Self.lockDependenciesSQL, [PostgresArray(wanted)]).rows {
                    guard let state = JobState(rawValue: try row.string("state")) else { throw QueueError.internalMismatch("unknown job state") }
                    if state == .dead || state == .cancelled { continue }
                    kept.append(try row.int64("id"))
                    if !state.isTerminal { pending.append(try row.int64("id")) }
                }
            }
            let found = try await connection.query(Self.runAfterSQL, [id, owner, attempt, PostgresArray(kept), pending.count]).rows
            guard let row = found.first else { return false }
            if pending.isEmpty {
                try await connection.announce(JobKind(rawValue: try row.string("kind")), on: QueueChannel.jobs)
            } else {
                try await connection.query(Self.linkDependenciesSQL, [PostgresArray(pending), PostgresArray(Array(repeating: id, count: pending.count))])
            }
            return true
        }
    }

    /// The jobs `id` runs after, ascending, with their results.
    func jobDependencies(of id: Int64) async throws -> [JobDependency] {
        try await executor.query("""
            SELECT d.id, d.kind, d.state, d.result::text AS result
            FROM jobs j JOIN jobs d ON d.id = ANY (j.depends_on) WHERE j.id = $1 ORDER BY d.id
            """, [id]).rows.map(JobDependency.init(row:))
    }

    /// Up to `limit` jobs that run after `id` and wait for it (while it has not ended), ascending (no results).
    func jobDependents(of id: Int64, limit: Int) async throws -> [JobDependency] {
        try await executor.query("""
            SELECT j.id, j.kind, j.state, NULL::text AS result
            FROM job_dependencies e JOIN jobs j ON j.id = e.job_id WHERE e.depends_on = $1 ORDER BY j.id LIMIT $2
            """, [id, limit]).rows.map(JobDependency.init(row:))
    }

    /// The jobs not ended yet that match any of the patterns ($1 kinds, $2 the payloads' fields,
    /// pairwise). One arm per state, each through that state's partial index by kind
    /// (`jobs_waiting_idx`, `jobs_claim_idx`; the running ones through `jobs_lease_idx`, as many as
    /// the fleet has slots): it reads the pending jobs of the kinds sought, never the finished
    /// ones nor other kinds' (`docs/queue.md`, "Finding pending jobs by what they work on").
    /// The matches and the limit are read through a materialised row, as in `finishManySQL`:
    /// known to the planner, they made every call a custom plan, planned anew each time (0.5 ms
    /// of planning against 0.05 ms of execution, twice a render: its request and its start).
    static let pendingMatchingSQL = """
        WITH sought AS MATERIALIZED (SELECT $1::text[] AS kinds, $2::jsonb[] AS contains, $3::integer AS most)
        SELECT found.id, found.kind, found.state, NULL::text AS result
        FROM sought, unnest(sought.kinds, sought.contains) AS wanted(kind, contains)
        CROSS JOIN LATERAL (
            SELECT id, kind, state FROM jobs WHERE state = 'waiting' AND kind = wanted.kind AND payload @> wanted.contains
            UNION ALL
            SELECT id, kind, state FROM jobs WHERE state = 'available' AND kind = wanted.kind AND payload @> wanted.contains
            UNION ALL
            SELECT id, kind, state FROM jobs WHERE state = 'running' AND kind = wanted.kind AND payload @> wanted.contains
        ) AS found
        GROUP BY found.id, found.kind, found.state ORDER BY found.id LIMIT (SELECT most FROM sought)
        """

    /// Up to `limit` jobs not ended yet (`waiting`, `available`, `running`) matching any of
    /// `matches`, ascending (no results).
    func jobPendingMatching(_ matches: [JobMatch], limit: Int) async throws -> [JobDependency] {
        guard !matches.isEmpty else { return [] }
        return try await executor.query(Self.pendingMatchingSQL, [
            PostgresArray(matches.map(\.kind.rawValue)), PostgresArray(matches.map(\.payloadContains)), limit,
        ]).rows.map(JobDependency.init(row:))
    }

    /// The kinds, the window and the number of samples are read through a materialised row, as in
    /// `pendingMatchingSQL`: known to the planner, they made a custom plan look 27 times cheaper
    /// than the generic one (the same walk of `jobs_finished_idx`), so every call was planned
    /// anew, 0.4 ms of planning each, and render admission reads it up to 100 times a second.
    static let recentRunTimesSQL = """
        WITH sampled AS MATERIALIZED (SELECT $1::text[] AS kinds, make_interval(secs => $2) AS window, $3::integer AS samples)
        SELECT k.kind, avg(extract(epoch FROM recent.finished_at - recent.started_at))::float8 AS seconds
        FROM sampled, unnest(sampled.kinds) AS k(kind)
        CROSS JOIN LATERAL (
            SELECT finished_at, started_at FROM jobs
            WHERE jobs.kind = k.kind AND state = 'completed' AND finished_at > now() - sampled.window
            ORDER BY finished_at DESC LIMIT sampled.samples
        ) AS recent
        GROUP BY k.kind
        """

    /// Per kind of `kinds`: the mean run time (start of the last attempt to completion) of its
    /// newest `samples` jobs completed within `window`; a kind with none is absent.
    ///
    /// Through `jobs_finished_idx` (finished_at, kind, state), newest first, reading the heap
    /// only for the rows of the kind.
    func jobRecentRunTimes(kinds: [JobKind], window: Duration, samples: Int) async throws -> [JobKind: Duration] {
        let rows = try await executor.query(Self.recentRunTimesSQL, [PostgresArray(kinds.map(\.rawValue)), window.seconds, samples]).rows
        var runTimes: [JobKind: Duration] = [:]
        for row in rows {
            guard let seconds = row["seconds"].flatMap(Double.init) else { continue }
            runTimes[JobKind(rawValue: try row.string("kind"))] = .seconds(max(0, seconds))
        }
        return runTimes
    }

    /// Dependents released and dependents ended `DEPENDENCY_FAILED`, fleet-wide, since the schema
    /// was created (counters that may run ahead by what rolled-back transactions did).
    func jobDependencyTotals() async throws -> DependencyTotals {
        let row = try await executor.query("""
            SELECT (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM job_dependency_releases) AS released,
                   (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM job_dependency_failures) AS failed
            """).rows[0]
        return DependencyTotals(released: try row.int("released"), failed: try row.int("failed"))
    }
}

extension JobDependency {
    init(row: PostgresRow) throws {
        guard let state = JobState(rawValue: try row.string("state")) else {
            throw PostgresError.decoding(column: "state", value: row["state"], expected: "job_state")
        }
        self.init(id: try row.int64("id"), kind: JobKind(rawValue: try row.string("kind")), state: state, result: row["result"])
    }
}
