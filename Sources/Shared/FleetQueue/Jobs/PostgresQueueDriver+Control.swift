import FleetPostgres
import Foundation

/// Job control: operators' statements. Filters are planned on every call (`.eachCall`): the best
/// plan for "dead jobs with code X" depends on how many there are, and these run rarely.
extension PostgresQueueDriver {
    /// The columns of a `JobSummary`.
    private static let summaryColumns = """
        id, kind, queue, state, priority, attempt, max_attempts, (errors -> -1)::text AS last_error, lease_owner,
        extract(epoch FROM created_at) AS created_at, extract(epoch FROM run_at) AS run_at,
        extract(epoch FROM started_at) AS started_at, extract(epoch FROM finished_at) AS finished_at
        """

    /// Sends `fleet_jobs` once per kind of the `source` rows (column `kind`), so idle workers
    /// claim what was just put back; a `SELECT` with column `sent` to reference in the statement.
    private static func announceKinds(from source: String) -> String {
        "SELECT count(\(QueueChannel.jobs.notifySQL(payload: "kind"))) AS sent FROM (SELECT DISTINCT kind FROM \(source)) AS kinds"
    }

    /// How a retried job looks: available at `$1` (now when null), its errors kept, `attempts`
    /// (an SQL expression) more attempts allowed; waiting instead while jobs it runs after are
    /// not completed (`pending.n`, from `retryPending`), so a dependent retried before its failed
    /// dependency runs after it.
    private static func retrySet(attempts: String) -> String {
        """
        state = CASE WHEN pending.n > 0 THEN 'waiting'::job_state ELSE 'available'::job_state END, waiting_on = pending.n,
        run_at = coalesce(to_timestamp($1::float8), now()), finished_at = NULL,
        cancel_requested_at = NULL, max_attempts = greatest(jobs.max_attempts, jobs.attempt + \(attempts))
        """
    }

    /// The CTEs `deps`, `pending` and `linked` of a retry: the dependencies of the jobs of the CTE
    /// `source` (columns `id`, `depends_on`) locked in id order and read as they are now (a
    /// dependency cannot complete unseen between this count and the commit: its trigger would find
    /// the job not yet waiting), per job how many of them are not completed, and their edges back
    /// in `job_dependencies` (an ended dependency's trigger removed them).
    private static func retryPending(of source: String) -> String {
        """
        deps AS (
            SELECT id, state FROM jobs WHERE id IN (SELECT unnest(depends_on) FROM \(source)) ORDER BY id FOR SHARE
        ),
        pending AS (
            SELECT s.id, count(deps.id) FILTER (WHERE deps.state <> 'completed')::integer AS n
            FROM \(source) s LEFT JOIN deps ON deps.id = ANY (s.depends_on) GROUP BY s.id
        ),
        linked AS (
            INSERT INTO job_dependencies (depends_on, job_id)
            SELECT deps.id, s.id FROM \(source) s JOIN deps ON deps.id = ANY (s.depends_on) WHERE deps.state <> 'completed'
            ON CONFLICT DO NOTHING
        ),
        """
    }

    /// `jobList`'s statement and its parameters (the plan test explains it). The page's ids come
    /// first, one branch per state the filter allows (all six when it names none), each its own
    /// subquery in id order with the page's limit, merged by id; then their rows. A branch's
    /// state is a constant, so a finished state's branch reads its own index alone
    /// (`jobs_finished_state_idx` by state, `jobs_finished_kind_idx` by state and kind, index
    /// only): a kind's page does not step through every newer job of other kinds on the primary
    /// key, which the planner would pick when it expects the kind everywhere (100 ms when the
    /// newest 100,000 jobs were of another kind). An open state's branch reads its partial index
    /// (the claim's, the lease's, the waiting jobs') and sorts what it finds: its cost follows
    /// that queue. The finished jobs' indexes are keyed on `-id`, and the branches ask for that
    /// order: only those indexes give it, so the planner cannot pick the primary key instead (it
    /// would, for a state or kind it expects everywhere, when the recent pages are not all
    /// visible: an index-only scan then costs it as much as a walk of the primary key). (Branches
    /// without their own LIMIT would be one append of the table whose children the planner
    /// cannot read in order from these indexes.)
    static func listStatement(_ filter: JobFilter, before: Int64?, limit: Int) -> (sql: String, parameters: [(any PostgresEncodable)?]) {
        var others = filter
        others.states = nil
        let (condition, parameters) = others.condition(firstParameter: 3)
        let states = filter.states.map { wanted in JobState.allCases.filter(wanted.contains) } ?? JobState.allCases
        let stateConditions = states.isEmpty ? ["false"] : states.map { "state = '\($0.rawValue)'::job_state" }
        let branches = stateConditions.map { state in
            "(SELECT id FROM jobs WHERE \(state) AND ($1::bigint IS NULL OR -id > -$1::bigint) AND \(condition) ORDER BY -id LIMIT $2)"
        }
        return ("""
            SELECT \(summaryColumns) FROM jobs
            WHERE id IN (SELECT id FROM (
                \(branches.joined(separator: "\n    UNION ALL\n    "))
            ) AS page ORDER BY id DESC LIMIT $2)
            ORDER BY id DESC
            """, [before, limit] + parameters)
    }

    /// Jobs matching `filter`, newest first, with ids below `before` (keyset pages), at most `limit`.
    func jobList(_ filter: JobFilter, before: Int64?, limit: Int) async throws -> [JobSummary] {
        let (sql, parameters) = Self.listStatement(filter, before: before, limit: limit)
        let rows = try await executor.query(sql, parameters, planning: .eachCall).rows
        let decoder = PostgresJSON.makeDecoder()
        return try rows.map { row in
            JobSummary(
                id: try row.int64("id"), kind: JobKind(rawValue: try row.string("kind")), queue: try row.string("queue"),
                state: try Self.state(row), priority: try row.int("priority"), attempt: try row.int("attempt"),
                maxAttempts: try row.int("max_attempts"),
                lastError: try row["last_error"].map { try decoder.decode(JobAttemptError.self, from: Data($0.utf8)) },
                workerID: row["lease_owner"],
                createdAt: try row.date("created_at"), runAt: try row.date("run_at"),
                startedAt: try row.optionalDate("started_at"), finishedAt: try row.optionalDate("finished_at"))
        }
    }

    /// How many jobs match `filter`, counting no further than `limit`.
    func jobCount(_ filter: JobFilter, limit: Int) async throws -> Int {
        let (condition, parameters) = filter.condition(firstParameter: 2)
        return try await executor.query(
            "SELECT count(*) AS n FROM (SELECT 1 FROM jobs WHERE \(condition) LIMIT $1) AS matching",
            [limit] + parameters, planning: .eachCall).rows[0].int("n")
    }

    /// A `dead` or `cancelled` job back to `available` at `runAt` (now when nil), errors kept,
    /// one more attempt allowed, unless `guard` (when the job is of its kinds) refuses it.
    func jobRetry(id: Int64, runAt: Date?, guard retryGuard: (any JobRetryGuard)?) async throws -> JobRetryResult {
        guard let retryGuard else { return try await Self.retryOne(id: id, runAt: runAt, on: executor) }
        return try await executor.transactionRetryingConflicts { (connection: PostgresConnection) async throws -> JobRetryResult in
            guard let row = try await connection.query(
                "SELECT kind, state, payload::text AS payload FROM jobs WHERE id = $1 FOR UPDATE", [id]).rows.first else { return .notFound }
            let candidate = RetryCandidate(id: id, kind: JobKind(rawValue: try row.string("kind")), payload: try row.string("payload"))
            let state = try Self.state(row)
            if retryGuard.kinds.contains(candidate.kind), state == .dead || state == .cancelled,
               let refusal = try await retryGuard.refusals(of: [candidate], on: connection)[id] {
                return .refused(refusal)
            }
            return try await Self.retryOne(id: id, runAt: runAt, on: connection)
        }
    }

    private static func retryOne(id: Int64, runAt: Date?, on executor: any PostgresExecutor) async throws -> JobRetryResult {
        let rows = try await executor.query("""
            WITH target AS (SELECT id, state AS previous, depends_on FROM jobs WHERE id = $2 FOR UPDATE),
            \(retryPending(of: "target"))
            retried AS (
                UPDATE jobs SET \(retrySet(attempts: "1"))
                FROM target JOIN pending USING (id) WHERE jobs.id = target.id AND jobs.state IN ('dead', 'cancelled')
                RETURNING jobs.kind, jobs.state
            ),
            announced AS (\(announceKinds(from: "retried WHERE state = 'available'")))
            SELECT target.previous FROM target, announced
            """, [runAt?.timeIntervalSince1970, id]).rows
        guard let row = rows.first else { return .notFound }
        let previous = try state(row, column: "previous")
        return previous == .dead || previous == .cancelled ? .retried : .notRetryable(previous)
    }

    /// Retries up to `limit` of the `dead` and `cancelled` jobs matching `filter`, oldest first,
    /// skipping rows others hold locked; returns how many. One short transaction per call.
    ///
    /// Oldest first, `ORDER BY -id DESC` so the finished jobs' indexes (keyed on `-id`, see
    /// `listStatement`) hand the rows over in order.
    func jobRetryBatch(_ filter: JobFilter, limit: Int) async throws -> Int {
        let (condition, parameters) = filter.restricted(to: [.dead, .cancelled]).condition(firstParameter: 3)
        return try await executor.query("""
            WITH picked AS (
                SELECT id, depends_on FROM jobs WHERE \(condition) ORDER BY -id DESC LIMIT $2 FOR UPDATE SKIP LOCKED
            ),
            \(Self.retryPending(of: "picked"))
            retried AS (
                UPDATE jobs SET \(Self.retrySet(attempts: "1"))
                FROM picked JOIN pending USING (id) WHERE jobs.id = picked.id AND jobs.state IN ('dead', 'cancelled')
                RETURNING jobs.kind, jobs.state
            ),
            announced AS (\(Self.announceKinds(from: "retried WHERE state = 'available'")))
            SELECT (SELECT count(*) FROM retried) AS n FROM announced
            """, [Double?.none, limit] + parameters, planning: .eachCall).rows[0].int("n")
    }

    /// Looks at up to `limit` of the `dead` and `cancelled` jobs matching `filter` with ids above
    /// `after`, oldest first, skipping rows others hold locked, and retries those `guard` does not
    /// refuse (a dry run only asks). One short transaction per call.
    ///
    /// Oldest first from `after`, as `jobRetryBatch`; the candidates locked, shown to the guard and
    /// retried in one transaction.
    func jobRetryBatch(
        _ filter: JobFilter, after: Int64?, limit: Int, guard retryGuard: any JobRetryGuard, dryRun: Bool
    ) async throws -> GuardedRetryBatch {
        let (condition, parameters) = filter.restricted(to: [.dead, .cancelled]).condition(firstParameter: 3)
        return try await executor.transactionRetryingConflicts { (connection: PostgresConnection) async throws -> GuardedRetryBatch in
            let candidates = try await connection.query("""
                SELECT id, kind, payload::text AS payload FROM jobs WHERE \(condition) AND -id < -$1::bigint
                ORDER BY -id DESC LIMIT $2 FOR UPDATE SKIP LOCKED
                """, [after ?? 0, limit] + parameters, planning: .eachCall).rows.map { row in
                RetryCandidate(id: try row.int64("id"), kind: JobKind(rawValue: try row.string("kind")), payload: try row.string("payload"))
            }
            let refused = candidates.isEmpty ? [:] : try await retryGuard.refusals(of: candidates, on: connection)
            let allowed = candidates.map(\.id).filter { refused[$0] == nil }
            var retried = allowed
            if !dryRun && !allowed.isEmpty { retried = try await Self.retry(ids: allowed, attempts: 1, on: connection) }
            return GuardedRetryBatch(scanned: candidates.count, lastID: candidates.last?.id, retried: retried, refused: refused)
        }
    }

    /// Retries the `dead` and `cancelled` jobs among `ids` with `attempts` more attempts each, at
    /// once, all in one statement (a dependency among them is read as it was before: its
    /// dependents wait for it); answers those retried.
    static func retry(ids: [Int64], attempts: Int, on executor: any PostgresExecutor) async throws -> [Int64] {
        try await executor.query("""
            WITH target AS (SELECT id, depends_on FROM jobs WHERE id = ANY ($2::bigint[]) ORDER BY id FOR UPDATE),
            \(retryPending(of: "target"))
            retried AS (
                UPDATE jobs SET \(retrySet(attempts: "$3::integer"))
                FROM target JOIN pending USING (id) WHERE jobs.id = target.id AND jobs.state IN ('dead', 'cancelled')
                RETURNING jobs.id, jobs.kind, jobs.state
            ),
            announced AS (\(announceKinds(from: "retried WHERE state = 'available'")))
            SELECT retried.id FROM retried, announced ORDER BY retried.id
            """, [Double?.none, PostgresArray(ids), attempts]).rows.map { try $0.int64("id") }
    }

    /// `id` and the `dead` or `cancelled` jobs it runs after, and those they run after, back to
    /// `available` (or `waiting`) together with `attempts` more attempts each; answers those
    /// retried. Without its failed dependencies a retried job would wait for them for ever.
    func jobRetryWithFailedDependencies(id: Int64, attempts: Int) async throws -> [Int64] {
        let chain = try await executor.query("""
            WITH RECURSIVE chain AS (
                SELECT id, depends_on FROM jobs WHERE id = $1
                UNION
                SELECT jobs.id, jobs.depends_on FROM chain JOIN jobs ON jobs.id = ANY (chain.depends_on)
                WHERE jobs.state IN ('dead', 'cancelled')
            )
            SELECT id FROM chain
            """, [id]).rows.map { try $0.int64("id") }
        return try await Self.retry(ids: chain, attempts: attempts, on: executor)
    }

    /// Deletes one finished job.
    func jobDiscard(id: Int64) async throws -> JobDiscardResult {
        let rows = try await executor.query("""
            WITH target AS (SELECT id, state FROM jobs WHERE id = $1 FOR UPDATE),
            deleted AS (
                DELETE FROM jobs USING target
                WHERE jobs.id = target.id AND target.state IN ('completed', 'dead', 'cancelled')
                RETURNING jobs.id
            )
            SELECT target.state, (SELECT count(*) FROM deleted) AS deleted FROM target
            """, [id]).rows
        guard let row = rows.first else { return .notFound }
        return try row.int("deleted") == 1 ? .discarded : .notFinished(try Self.state(row))
    }

    /// Deletes up to `limit` of the finished jobs matching `filter`; returns how many.
    ///
    /// Oldest first, as `jobRetryBatch`.
    func jobDiscardBatch(_ filter: JobFilter, limit: Int) async throws -> Int {
        let (condition, parameters) = filter.restricted(to: [.completed, .dead, .cancelled]).condition(firstParameter: 2)
        return try await executor.query("""
            DELETE FROM jobs WHERE id IN (
                SELECT id FROM jobs WHERE \(condition) ORDER BY -id DESC LIMIT $1 FOR UPDATE SKIP LOCKED
            )
            """, [limit] + parameters, planning: .eachCall).affectedRows
    }

    /// Pauses `target` (no claim takes its jobs); false if it already was.
    func queuePause(_ target: PauseTarget, by actor: String) async throws -> Bool {
        let paused = try await executor.query("""
            INSERT INTO queue_pauses (scope, name, paused_by) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING
            """, [target.scope.rawValue, target.name, actor]).affectedRows == 1
        // Every dispatcher's render admission refuses renders of a paused kind from its next read.
        if paused { try await executor.announce(.pauses, on: QueueChannel.control) }
        return paused
    }

    /// Lifts the pause and wakes the workers; false if it was not paused.
    func queueResume(_ target: PauseTarget) async throws -> Bool {
        // Waking every kind's workers is cheap and covers a paused queue, whose kinds are unknown here.
        let resumed = try await executor.query("""
            WITH resumed AS (DELETE FROM queue_pauses WHERE scope = $1 AND name = $2 RETURNING scope, name),
            woken AS (
                SELECT count(\(QueueChannel.jobs.notifySQL(payload: "kind"))) AS sent FROM (
                    SELECT name AS kind FROM resumed WHERE scope = 'kind'
                    UNION SELECT DISTINCT kind FROM jobs WHERE state = 'available' AND EXISTS (SELECT 1 FROM resumed WHERE scope = 'queue')
                ) AS kinds
            )
            SELECT count(*) AS n FROM resumed, woken
            """, [target.scope.rawValue, target.name]).rows[0].int("n") == 1
        if resumed { try await executor.announce(.pauses, on: QueueChannel.control) }
        return resumed
    }

    func queuePauses() async throws -> [QueuePause] {
        try await executor.query("""
            SELECT scope, name, paused_by, extract(epoch FROM paused_at) AS paused_at FROM queue_pauses ORDER BY scope, name
            """).rows.map { row in
            guard let scope = PauseTarget.Scope(rawValue: try row.string("scope")) else {
                throw PostgresError.decoding(column: "scope", value: row["scope"], expected: "kind or queue")
            }
            return QueuePause(target: PauseTarget(scope: scope, name: try row.string("name")),
                              pausedBy: try row.string("paused_by"), pausedAt: try row.date("paused_at"))
        }
    }

    /// Appends an operator action to the audit trail.
    func auditRecord(actor: String, action: String, target: String, affected: Int) async throws {
        try await executor.query(
            "INSERT INTO operator_audit (actor, action, target, affected) VALUES ($1, $2, $3::jsonb, $4)",
            [actor, action, target, affected])
    }

    /// The trail, newest first, with ids below `before`.
    func auditList(before: Int64?, limit: Int) async throws -> [AuditEntry] {
        try await executor.query("""
            SELECT id, extract(epoch FROM at) AS at, actor, action, target::text AS target, affected FROM operator_audit
            WHERE $1::bigint IS NULL OR id < $1::bigint ORDER BY id DESC LIMIT $2
            """, [before, limit]).rows.map { row in
            AuditEntry(id: try row.int64("id"), at: try row.date("at"), actor: try row.string("actor"),
                       action: try row.string("action"), target: try row.string("target"), affected: try row.int("affected"))
        }
    }

    private static func state(_ row: PostgresRow, column: String = "state") throws -> JobState {
        guard let state = JobState(rawValue: try row.string(column)) else {
            throw PostgresError.decoding(column: column, value: row[column], expected: "job_state")
        }
        return state
    }

    // MARK: The console's reads

    /// Dead jobs grouped by kind and latest error code, largest first (at most 200 groups).
    ///
    /// The groups and their counts from `dead_job_counts` with the changes not folded yet (exact,
    /// a few dozen rows whatever the number of dead jobs); each group's oldest and newest job (its
    /// sample) from the two ends of its range of `jobs_dead_groups_idx` (kind, code, finished_at,
    /// id): two index probes per group.
    func jobDeadGroups() async throws -> [DeadJobGroup] {
        try await executor.query("""
            WITH groups AS (
                SELECT kind, code, sum(n)::bigint AS n FROM (
                    SELECT kind, code, n FROM dead_job_counts
                    UNION ALL SELECT kind, code, delta FROM job_count_changes WHERE state = 'dead'
                ) AS counted
                GROUP BY kind, code HAVING sum(n) > 0
                ORDER BY n DESC, kind LIMIT 200
            )
            SELECT g.kind, g.code, g.n, extract(epoch FROM oldest.finished_at) AS first_seen,
                   extract(epoch FROM newest.finished_at) AS last_seen, newest.id AS sample_id, j.payload::text AS payload
            FROM groups g
            -- A group of jobs without a code has a branch of its own: `=` or `IS NULL` each
            -- read the index's range, an `OR` of them would read the kind's whole range (and
            -- `IS NULL` keeps the index's order only when the ORDER BY names its columns).
            CROSS JOIN LATERAL (
                (SELECT finished_at FROM jobs WHERE state = 'dead' AND kind = g.kind AND last_error_code = g.code
                 ORDER BY finished_at LIMIT 1)
                UNION ALL
                (SELECT finished_at FROM jobs WHERE state = 'dead' AND kind = g.kind AND last_error_code IS NULL AND g.code IS NULL
                 ORDER BY kind, last_error_code, finished_at LIMIT 1)
            ) AS oldest
            CROSS JOIN LATERAL (
                (SELECT finished_at, id FROM jobs WHERE state = 'dead' AND kind = g.kind AND last_error_code = g.code
                 ORDER BY finished_at DESC, id DESC LIMIT 1)
                UNION ALL
                (SELECT finished_at, id FROM jobs WHERE state = 'dead' AND kind = g.kind AND last_error_code IS NULL AND g.code IS NULL
                 ORDER BY kind DESC, last_error_code DESC, finished_at DESC, id DESC LIMIT 1)
            ) AS newest
            JOIN jobs j ON j.id = newest.id
            ORDER BY g.n DESC, g.kind, g.code
            """).rows.map { row in
            DeadJobGroup(kind: try row.string("kind"), errorCode: row["code"], count: try row.int("n"), firstSeen: try row.date("first_seen"),
                         lastSeen: try row.date("last_seen"), sampleJobID: try row.int64("sample_id"), samplePayload: try row.string("payload"))
        }
    }

    /// Folds the count changes recorded since the last fold into the finished jobs' counts
    /// (`docs/queue.md`, "A large table"); returns how many it folded.
    ///
    /// Moves the count changes the triggers on `jobs` recorded into `job_counts` and
    /// `dead_job_counts`, in one statement: a change is counted once (a fold running at the same
    /// time waits for this one's rows, then finds them gone). Returns how many changes it moved.
    func jobFoldCounts() async throws -> Int {
        try await executor.query("""
            WITH taken AS (
                DELETE FROM job_count_changes RETURNING minute, kind, state, code, delta
            ),
            by_minute AS (
                INSERT INTO job_counts AS c (minute, kind, state, code, n)
                SELECT minute, kind, state, code, sum(delta) FROM taken GROUP BY 1, 2, 3, 4
                ON CONFLICT (minute, kind, state, code) DO UPDATE SET n = c.n + excluded.n
            ),
            dead AS (
                INSERT INTO dead_job_counts AS c (kind, code, n)
                SELECT kind, code, sum(delta) FROM taken WHERE state = 'dead' GROUP BY 1, 2
                ON CONFLICT (kind, code) DO UPDATE SET n = c.n + excluded.n
            )
            SELECT count(*) AS n FROM taken
            """).rows[0].int("n")
    }

    /// Deletes the finished jobs' counts that reached zero; returns how many.
    ///
    /// Deletes the counts that reached zero (their jobs pruned, retried or discarded).
    func jobCountsDropEmpty() async throws -> Int {
        try await executor.query("""
            WITH minutes AS (DELETE FROM job_counts WHERE n = 0 RETURNING 1),
            groups AS (DELETE FROM dead_job_counts WHERE n = 0 RETURNING 1)
            SELECT (SELECT count(*) FROM minutes) + (SELECT count(*) FROM groups) AS n
            """).rows[0].int("n")
    }

    /// CTEs `queued` (due, scheduled, lag), `retrying`, `waiting` and `running`: the open jobs per
    /// kind, each read from its partial index (the claim's, the retried jobs', the waiting jobs',
    /// the lease's; no heap once vacuumed), so the cost follows the queue, not the table.
    static let openJobCounts = """
        queued AS (
            SELECT kind, count(*) FILTER (WHERE run_at <= now()) AS due, count(*) FILTER (WHERE run_at > now()) AS scheduled,
                   extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now())) AS lag
            FROM jobs WHERE state = 'available' GROUP BY kind
        ), retrying AS (
            SELECT kind, count(*) AS retrying FROM jobs WHERE state = 'available' AND attempt > 0 GROUP BY kind
        ), waiting AS (
            SELECT kind, count(*) AS waiting FROM jobs WHERE state = 'waiting' GROUP BY kind
        ), running AS (
            SELECT kind, count(*) AS running FROM jobs WHERE state = 'running' GROUP BY kind
        )
        """

    /// Each kind's queue now and what finished in the last 60 minutes (`QueueOverview`).
    ///
    /// One statement whose cost follows the queue, not the table: due, scheduled and lag come
    /// from the claim's partial index (kind and run_at, no heap once vacuumed), retrying from the
    /// retried jobs' own (`jobs_retrying_idx`), waiting from theirs (`jobs_waiting_idx`), running
    /// from the lease index: exact. What finished in the last 60 minutes (the current one so far),
    /// per kind and per minute for the chart, from the counts per minute (`job_counts` and the
    /// changes not folded yet): exact, some 60 rows per kind and state.
    func queueOverview() async throws -> QueueOverview {
        let row = try await executor.query("""
            WITH finished AS (
                SELECT kind, state, (extract(epoch FROM date_trunc('minute', now()) - minute) / 60)::int AS minutes_ago, n FROM (
                    SELECT minute, kind, state, n FROM job_counts
                    WHERE minute > date_trunc('minute', now()) - interval '60 minutes' AND state IN ('completed', 'dead')
                    UNION ALL
                    SELECT minute, kind, state, delta FROM job_count_changes
                    WHERE minute > date_trunc('minute', now()) - interval '60 minutes' AND state IN ('completed', 'dead')
                ) AS counted
            ), \(Self.openJobCounts), ended AS (
                SELECT kind, sum(n) FILTER (WHERE state = 'completed') AS completed, sum(n) FILTER (WHERE state = 'dead') AS dead
                FROM finished GROUP BY kind HAVING sum(n) > 0
            ), paused AS (
                SELECT name AS kind FROM queue_pauses WHERE scope = 'kind'
            )
            SELECT
                (SELECT coalesce(json_agg(json_build_object(
                        'kind', k.kind, 'due', coalesce(q.due, 0), 'scheduled', coalesce(q.scheduled, 0),
                        'retrying', coalesce(rt.retrying, 0), 'waiting', coalesce(w.waiting, 0), 'running', coalesce(r.running, 0), 'lagSeconds', q.lag,
                        'completed', coalesce(e.completed, 0), 'dead', coalesce(e.dead, 0), 'paused', p.kind IS NOT NULL)
                        ORDER BY k.kind), '[]')
                 FROM (SELECT kind FROM queued UNION SELECT kind FROM waiting UNION SELECT kind FROM running
                       UNION SELECT kind FROM ended UNION SELECT kind FROM paused) k
                 LEFT JOIN queued q USING (kind) LEFT JOIN retrying rt USING (kind) LEFT JOIN waiting w USING (kind)
                 LEFT JOIN running r USING (kind)
                 LEFT JOIN ended e USING (kind)
                 LEFT JOIN paused p USING (kind))::text AS kinds,
                (SELECT coalesce(json_agg(json_build_array(minutes_ago, completed, failed)), '[]')
                 FROM (SELECT minutes_ago, coalesce(sum(n) FILTER (WHERE state = 'completed'), 0) AS completed,
                              coalesce(sum(n) FILTER (WHERE state = 'dead'), 0) AS failed
                       FROM finished GROUP BY 1) m)::text AS minutes
            """).rows[0]
        let kinds = try JSONDecoder().decode([QueueOverview.Kind].self, from: Data(try row.string("kinds").utf8))
        var minutes = Array(repeating: (completed: 0, failed: 0), count: 60)
        for minute in try JSONDecoder().decode([[Int]].self, from: Data(try row.string("minutes").utf8)) where (0..<60).contains(minute[0]) {
            minutes[59 - minute[0]] = (minute[1], minute[2])
        }
        return QueueOverview(kinds: kinds, minutes: minutes)
    }
}
