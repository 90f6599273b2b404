import FleetPostgres
import Foundation

/// The `schedule_slots` statements. A slot is claimed by inserting its `(entry, slot_at)` row:
/// the primary key admits one dispatcher, and a claim whose transaction rolls back leaves the
/// slot to the next one that tries (the row-level wait of `ON CONFLICT`, not an advisory lock).
public struct ScheduleSlots: Sendable {
    let pool: PostgresPool
    /// Slot rows older than this are deleted; it must exceed any lateness bound, so a pruned
    /// slot is never due again.
    public static let retention: Duration = .seconds(86_400)

    public init(pool: PostgresPool) { self.pool = pool }

    public struct Claim: Sendable, Equatable {
        /// The job a job entry enqueued with its slot; a graph entry's first job.
        public let jobID: Int64?
    }

    /// What a won slot enqueues in its claim's transaction.
    public enum Enqueue: Sendable {
        case job(NewJob)
        case graph(JobGraph)
    }

    /// Claims `slot` of `entry` for `owner`, enqueueing `jobs` in the same transaction; nil when
    /// another dispatcher has it. Also deletes a batch of slot rows past their retention.
    public func claim(entry: String, slot: Date, owner: String, enqueue jobs: Enqueue?) async throws -> Claim? {
        try await pool.withConnection { connection in
            try await connection.transaction { connection in
                let won = try await connection.query("""
                    WITH pruned AS (
                        DELETE FROM schedule_slots WHERE (entry, slot_at) IN (
                            SELECT entry, slot_at FROM schedule_slots WHERE slot_at < now() - make_interval(secs => $4)
                            ORDER BY slot_at LIMIT 100 FOR UPDATE SKIP LOCKED)
                    )
                    INSERT INTO schedule_slots (entry, slot_at, claimed_by) VALUES ($1, to_timestamp($2), $3)
                    ON CONFLICT DO NOTHING RETURNING entry
                    """, [entry, Int64(slot.timeIntervalSince1970), owner, Self.retention.seconds]).rows.count == 1
                guard won else { return nil }
                let enqueued: [EnqueuedJob]
                switch jobs {
                case nil: return Claim(jobID: nil)
                case .job(let job): enqueued = try await JobQueue.enqueue([job], in: connection)
                case .graph(let graph): enqueued = try await JobQueue.enqueue(graph, in: connection)
                }
                try await connection.query(
                    "UPDATE schedule_slots SET job_id = $3, finished_at = now() WHERE entry = $1 AND slot_at = to_timestamp($2)",
                    [entry, Int64(slot.timeIntervalSince1970), enqueued[0].id])
                return Claim(jobID: enqueued[0].id)
            }
        }
    }

    /// Records that a built-in task of a won slot ended, with its error if it failed.
    public func finish(entry: String, slot: Date, error: String?) async throws {
        try await pool.query(
            "UPDATE schedule_slots SET finished_at = now(), error = $3 WHERE entry = $1 AND slot_at = to_timestamp($2)",
            [entry, Int64(slot.timeIntervalSince1970), error])
    }

    /// A slot's run: who claimed it, the job it enqueued, and its error if it failed.
    public struct Run: Sendable {
        public let slotAt: Date
        public let claimedBy: String
        public let jobID: Int64?
        public let error: String?
    }

    /// Each entry's latest slot run (the table keeps `retention` of them).
    public func lastRuns() async throws -> [String: Run] {
        var runs: [String: Run] = [:]
        for row in try await pool.query("""
            SELECT DISTINCT ON (entry) entry, extract(epoch FROM slot_at) AS slot_at, claimed_by, job_id, error
            FROM schedule_slots ORDER BY entry, slot_at DESC
            """).rows {
            runs[try row.string("entry")] = Run(
                slotAt: try row.date("slot_at"), claimedBy: try row.string("claimed_by"), jobID: row["job_id"].flatMap { Int64($0) }, error: row["error"])
        }
        return runs
    }
}

