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
        "SELECT count(pg_notify('\(QueueChannel.jobs)', kind)) AS sent FROM (SELECT DISTINCT kind FROM \(source)) AS kinds"
    }

    /// How a retried job looks: available at `runAt`, its errors kept, one more attempt allowed.
    private static let retrySet = """
        state = 'available', run_at = coalesce(to_timestamp($1::float8), now()), finished_at = NULL,
        cancel_requested_at = NULL, max_attempts = greatest(jobs.max_attempts, jobs.attempt + 1)
        """

    /// `jobList`'s statement and its parameters (the plan test explains it).
    static func listStatement(_ filter: JobFilter, before: Int64?, limit: Int) -> (sql: String, parameters: [(any PostgresEncodable)?]) {
        let (condition, parameters) = filter.condition(firstParameter: 3)
        return ("""
            SELECT \(summaryColumns) FROM jobs
            WHERE ($1::bigint IS NULL OR id < $1::bigint) AND \(condition)
            ORDER BY id DESC LIMIT $2
            """, [before, limit] + parameters)
    }

    public func jobList(_ filter: JobFilter, before: Int64?, limit: Int) async throws -> [JobSummary] {
        let (sql, parameters) = Self.listStatement(filter, before: before, limit: limit)
        let rows = try await executor.query(sql, parameters, planning: .eachCall).rows
        let decoder = PostgresJSON.makeDecoder()
        return try rows.map { row in
            JobSummary(
                id: try row.int64("id"), kind: JobKind(rawValue: try row.string("kind")), queue: try row.string("queue"),
                state: try Self.state(row), priority: try row.int("priority"), attempt: try row.int("attempt"),
                maxAttempts: try row.int("max_attempts"),
                lastError: try row["last_error"].map { try decoder.decode(JobAttemptError.self, from: Data($0.utf8)) },
                workerId: row["lease_owner"],
                createdAt: try row.date("created_at"), runAt: try row.date("run_at"),
                startedAt: try row.optionalDate("started_at"), finishedAt: try row.optionalDate("finished_at"))
        }
    }

    public func jobCount(_ filter: JobFilter, limit: Int) async throws -> Int {
        let (condition, parameters) = filter.condition(firstParameter: 2)
        return try await executor.query(
            "SELECT count(*) AS n FROM (SELECT 1 FROM jobs WHERE \(condition) LIMIT $1) AS matching",
            [limit] + parameters, planning: .eachCall).rows[0].int("n")
    }

    public func jobRetry(id: Int64, runAt: Date?) async throws -> JobRetryResult {
        let rows = try await executor.query("""
            WITH target AS (SELECT id, state AS previous FROM jobs WHERE id = $2 FOR UPDATE),
            retried AS (
                UPDATE jobs SET \(Self.retrySet)
                FROM target WHERE jobs.id = target.id AND jobs.state IN ('dead', 'cancelled')
                RETURNING jobs.kind
            ),
            announced AS (\(Self.announceKinds(from: "retried")))
            SELECT target.previous FROM target, announced
            """, [runAt?.timeIntervalSince1970, id]).rows
        guard let row = rows.first else { return .notFound }
        let previous = try Self.state(row, column: "previous")
        return previous == .dead || previous == .cancelled ? .retried : .notRetryable(previous)
    }

    public func jobRetryBatch(_ filter: JobFilter, limit: Int) async throws -> Int {
        let (condition, parameters) = filter.restricted(to: [.dead, .cancelled]).condition(firstParameter: 3)
        return try await executor.query("""
            WITH picked AS (
                SELECT id FROM jobs WHERE \(condition) ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED
            ),
            retried AS (
                UPDATE jobs SET \(Self.retrySet)
                FROM picked WHERE jobs.id = picked.id AND jobs.state IN ('dead', 'cancelled')
                RETURNING jobs.kind
            ),
            announced AS (\(Self.announceKinds(from: "retried")))
            SELECT (SELECT count(*) FROM retried) AS n FROM announced
            """, [Double?.none, limit] + parameters, planning: .eachCall).rows[0].int("n")
    }

    public func jobDiscard(id: Int64) async throws -> JobDiscardResult {
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

    public func jobDiscardBatch(_ filter: JobFilter, limit: Int) async throws -> Int {
        let (condition, parameters) = filter.restricted(to: [.completed, .dead, .cancelled]).condition(firstParameter: 2)
        return try await executor.query("""
            DELETE FROM jobs WHERE id IN (
                SELECT id FROM jobs WHERE \(condition) ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED
            )
            """, [limit] + parameters, planning: .eachCall).affectedRows
    }

    public func queuePause(_ target: PauseTarget, by actor: String) async throws -> Bool {
        try await executor.query("""
            INSERT INTO queue_pauses (scope, name, paused_by) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING
            """, [target.scope.rawValue, target.name, actor]).affectedRows == 1
    }

    public func queueResume(_ target: PauseTarget) async throws -> Bool {
        // Waking every kind's workers is cheap and covers a paused queue, whose kinds are unknown here.
        try await executor.query("""
            WITH resumed AS (DELETE FROM queue_pauses WHERE scope = $1 AND name = $2 RETURNING scope, name),
            woken AS (
                SELECT count(pg_notify('\(QueueChannel.jobs)', kind)) AS sent FROM (
                    SELECT name AS kind FROM resumed WHERE scope = 'kind'
                    UNION SELECT DISTINCT kind FROM jobs WHERE state = 'available' AND EXISTS (SELECT 1 FROM resumed WHERE scope = 'queue')
                ) AS kinds
            )
            SELECT count(*) AS n FROM resumed, woken
            """, [target.scope.rawValue, target.name]).rows[0].int("n") == 1
    }

    public func queuePauses() async throws -> [QueuePause] {
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

    public func auditRecord(actor: String, action: String, target: String, affected: Int) async throws {
        try await executor.query(
            "INSERT INTO operator_audit (actor, action, target, affected) VALUES ($1, $2, $3::jsonb, $4)",
            [actor, action, target, affected])
    }

    public func auditList(before: Int64?, limit: Int) async throws -> [AuditEntry] {
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
}
