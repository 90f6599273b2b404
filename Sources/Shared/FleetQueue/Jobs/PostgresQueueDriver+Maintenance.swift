import FleetPostgres
import FleetSupport
import Foundation

/// The statements of the queue's maintenance: the lease rescue, the reaper of dead workers, the
/// pruner, the unknown kinds' sweep.
extension PostgresQueueDriver {
    /// Puts back running jobs whose lease expired, counting the attempt.
    func jobRescueExpired(limit: Int) async throws -> [RescuedJob] {
        let rows = try await executor.withRetry { connection in
            try await connection.query(Self.rescueExpiredSQL, [limit]).rows
        }
        return try rows.map(RescuedJob.init(row:))
    }

    /// Rescues up to `$1` running jobs whose lease expired, oldest expiry first.
    static let rescueExpiredSQL = """
        WITH taken AS (
            SELECT id, lease_owner FROM jobs WHERE state = 'running' AND lease_expires_at < now()
            ORDER BY lease_expires_at LIMIT $1 FOR UPDATE SKIP LOCKED
        ),
        \(putBack(stillHeld: "jobs.lease_expires_at < now()", code: .leaseExpired,
                  message: "'lease expired: worker ' || coalesce(jobs.lease_owner, '?') || ' stopped renewing it'"))
        SELECT id, kind, state FROM rescued WHERE \(putBackSent)
        """

    /// The CTEs `rescued`, `notified` and `announced` that put running jobs back: those of the
    /// statement's CTE `taken` (columns `id`, `lease_owner`, rows locked FOR UPDATE SKIP LOCKED)
    /// whose row, read again once locked, is still running and satisfies `stillHeld`. The attempt
    /// counts: the job goes back to `available` at once, or ends `dead` when it was its last
    /// (`cancelled` when a cancel was asked), with an entry of `code` and `message` (an SQL
    /// expression over the row as it was) in its errors. Jobs that ended send `fleet_jobs_finished`;
    /// the kinds with a job to run again send `fleet_jobs`, so a worker takes it at once rather
    /// than at its next poll. `rescued` returns `id`, `kind`, the new `state` and the `owner` it
    /// was taken from. The caller's final SELECT filters on `putBackSent`, which runs the notifies.
    /// Shared by the lease rescue and the reaper of dead workers.
    static func putBack(stillHeld: String, code: JobErrorCode, message: String) -> String {
        """
        rescued AS (
        UPDATE jobs SET
            state = CASE WHEN jobs.cancel_requested_at IS NOT NULL THEN 'cancelled'::job_state
                         WHEN jobs.attempt >= jobs.max_attempts THEN 'dead'::job_state
                         ELSE 'available'::job_state END,
            finished_at = CASE WHEN jobs.cancel_requested_at IS NULL AND jobs.attempt < jobs.max_attempts
                               THEN NULL ELSE now() END,
            run_at = now(),
            errors = jobs.errors || jsonb_build_array(jsonb_build_object(
                'attempt', jobs.attempt, 'at', now(), 'code', '\(code)', 'worker', jobs.lease_owner, 'error', \(message))),
            last_error_code = '\(code)',
            lease_owner = NULL,
            lease_expires_at = NULL
        FROM taken
        WHERE jobs.id = taken.id AND jobs.state = 'running' AND \(stillHeld)
        RETURNING jobs.id, jobs.kind, jobs.state, jobs.finish_watched, jobs.limit_keys, taken.lease_owner AS owner
        ),
        notified AS (\(notifyFinished(from: "rescued"))),
        announced AS (
            SELECT count(\(QueueChannel.jobs.notifySQL(payload: "kind"))) AS sent
            FROM (SELECT DISTINCT kind FROM rescued WHERE state = 'available') AS again
        )
        """
    }

    /// Filters the final SELECT of a statement using `putBack`: runs its notifications once.
    static let putBackSent = "(SELECT sent FROM notified) >= 0 AND (SELECT sent FROM announced) >= 0"

    /// Takes back the running jobs of the workers whose session lock is free (`WorkerLock`): their
    /// process died, or lost its LISTEN connection. Each is marked stopped. Safe from any number of
    /// processes at once.
    func workerReapLost() async throws -> [LostWorker] {
        // Not retried: its caller looks again within a second, also when the database comes
        // back, which a retry backing off up to 2 s would not.
        let rows = try await executor.query(Self.reapLostSQL).rows
        var jobs: [String: [RescuedJob]] = [:]
        for row in rows {
            let worker = try row.string("worker")
            if row["id"] == nil { jobs[worker, default: []] += [] } else { jobs[worker, default: []].append(try RescuedJob(row: row)) }
        }
        return jobs.map { LostWorker(id: $0.key, jobs: $0.value.sorted { $0.id < $1.id }) }.sorted { $0.id < $1.id }
    }

    /// Takes back the running jobs of every worker whose LISTEN session is gone (`WorkerLock`):
    /// its row records a lock taken on this very server run, and nobody holds that lock now. The
    /// probe takes the lock for the transaction, so two reapers never take the same worker, and a
    /// worker reconnecting meanwhile finds it taken (and tries again a few seconds later). The
    /// worker's row is marked stopped, so it is not probed again, unless a job of it was skipped
    /// (locked by someone else at that instant): then the next run takes it. One row per job
    /// taken back, and one with NULL job columns per worker found dead with none.
    static let reapLostSQL = """
        WITH candidates AS MATERIALIZED (
            SELECT id FROM workers WHERE stopped_at IS NULL AND lock_server_start = pg_postmaster_start_time()
        ),
        -- True: no session holds the worker's lock, its LISTEN connection is gone.
        lost AS MATERIALIZED (
            SELECT id FROM candidates WHERE pg_try_advisory_xact_lock(\(WorkerLock.namespace), hashtext(id))
        ),
        taken AS MATERIALIZED (
            SELECT id, lease_owner FROM jobs WHERE state = 'running' AND lease_owner IN (SELECT id FROM lost)
            FOR UPDATE OF jobs SKIP LOCKED
        ),
        \(putBack(stillHeld: "jobs.lease_owner = taken.lease_owner", code: .workerLost,
                  message: "'worker lost: the session of worker ' || jobs.lease_owner || ' ended (the process died or lost its database connection)'")),
        stopped AS (
            UPDATE workers SET stopped_at = now() FROM lost
            WHERE workers.id = lost.id AND NOT EXISTS (
                SELECT 1 FROM jobs WHERE jobs.state = 'running' AND jobs.lease_owner = lost.id AND jobs.id NOT IN (SELECT id FROM taken))
            RETURNING workers.id
        )
        SELECT lost.id AS worker, rescued.id, rescued.kind, rescued.state
        FROM lost LEFT JOIN rescued ON rescued.owner = lost.id
        WHERE \(putBackSent) AND (SELECT count(*) FROM stopped) >= 0
        """

    /// Deletes up to `limit` finished jobs older than their retention, oldest first, those that
    /// finished at `from` or later (microseconds since 1970; nil: from the oldest).
    ///
    /// The oldest finished jobs first, by `jobs_finished_idx` from the shortest retention down,
    /// starting at `from` (`PruneFrontier`): the cost follows the rows deleted, not the table, nor
    /// the entries of rows deleted earlier that a held snapshot keeps in the index.
    func jobDeleteFinished(_ retention: Retention, limit: Int, from: Int64?) async throws -> PrunedBatch {
        let row = try await executor.query("""
            WITH deleted AS (
                DELETE FROM jobs WHERE id IN (
                    SELECT id FROM jobs
                    WHERE finished_at < now() - make_interval(secs => least($1::float8, $2::float8, $3::float8))
                      AND finished_at >= coalesce(timestamptz 'epoch' + $5::bigint * interval '1 microsecond', '-infinity')
                      AND ((state = 'completed' AND finished_at < now() - make_interval(secs => $1))
                        OR (state = 'cancelled' AND finished_at < now() - make_interval(secs => $2))
                        OR (state = 'dead' AND finished_at < now() - make_interval(secs => $3)))
                    ORDER BY finished_at
                    LIMIT $4
                )
                RETURNING finished_at
            )
            SELECT count(*) AS deleted,
                (extract(epoch FROM max(finished_at) - timestamptz 'epoch') * 1000000)::bigint AS newest
            FROM deleted
            """, [retention.completed.seconds, retention.cancelled.seconds, retention.dead.seconds, limit, from]).rows[0]
        return PrunedBatch(deleted: try row.int("deleted"), newest: row["newest"].flatMap { Int64($0) })
    }

    /// Ends as `dead` the queued jobs whose kind is not in `known`, once older than `grace`.
    func jobKillUnknownKinds(known: Set<JobKind>, grace: Duration) async throws -> [Int64] {
        try await executor.query("""
            WITH killed AS (
            UPDATE jobs SET state = 'dead', finished_at = now(),
                errors = errors || jsonb_build_array(jsonb_build_object(
                    'attempt', attempt, 'at', now(), 'code', '\(JobErrorCode.unknownKind)',
                    'error', 'unknown job kind ''' || kind || ''': no worker of this fleet handles it')),
                last_error_code = '\(JobErrorCode.unknownKind)'
            WHERE state = 'available' AND NOT (kind = ANY($1::text[])) AND created_at < now() - make_interval(secs => $2)
            RETURNING id, state, finish_watched, limit_keys
            ),
            notified AS (\(Self.notifyFinished(from: "killed")))
            SELECT id FROM killed WHERE (SELECT sent FROM notified) >= 0
            """, [PostgresArray(known.map(\.rawValue).sorted()), grace.seconds]).rows.map { try $0.int64("id") }
    }
}

extension RescuedJob {
    init(row: PostgresRow) throws {
        self.init(id: try row.int64("id"), kind: JobKind(rawValue: try row.string("kind")),
                  state: JobState(rawValue: try row.string("state")) ?? .available)
    }
}
