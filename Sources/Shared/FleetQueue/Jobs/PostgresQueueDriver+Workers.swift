import FleetPostgres
import FleetSupport
import Foundation

/// The statements of the `workers` rows: a worker's start and stop, the live list, the stale rows' removal.
extension PostgresQueueDriver {
    func workerRegister(_ worker: WorkerRecord) async throws {
        _ = try await executor.withRetry { connection in
            try await connection.query("""
                INSERT INTO workers (id, host, pid, executable, kinds) VALUES ($1, $2, $3, $4, $5)
                ON CONFLICT (id) DO UPDATE SET last_heartbeat_at = now(), stopped_at = NULL
                """, [worker.id, worker.host, worker.pid, worker.executable, PostgresArray(worker.kinds.map(\.rawValue))])
        }
    }

    func workerStop(id: String) async throws {
        _ = try await executor.withRetry { connection in
            try await connection.query("UPDATE workers SET stopped_at = now() WHERE id = $1", [id])
        }
    }

    func workerDeleteStale(olderThan age: Duration) async throws -> Int {
        try await executor.query(
            "DELETE FROM workers WHERE last_heartbeat_at < now() - make_interval(secs => $1)", [age.seconds]).affectedRows
    }

    /// Workers not stopped that heartbeated within `heartbeatWithin`, with the jobs each is running.
    func workerListLive(heartbeatWithin: Duration) async throws -> [LiveWorker] {
        let rows = try await executor.query("""
            SELECT w.id, w.host, w.pid, w.executable, array_to_json(w.kinds)::text AS kinds,
                extract(epoch FROM w.started_at) AS started_at, extract(epoch FROM w.last_heartbeat_at) AS last_heartbeat_at,
                coalesce(held.running, 0) AS running
            FROM workers w
            LEFT JOIN (SELECT lease_owner, count(*) AS running FROM jobs WHERE state = 'running' GROUP BY lease_owner) AS held
                ON held.lease_owner = w.id
            WHERE w.stopped_at IS NULL AND w.last_heartbeat_at > now() - make_interval(secs => $1)
            ORDER BY w.id
            """, [heartbeatWithin.seconds]).rows
        return try rows.map { row in
            let kinds = try JSONDecoder().decode([String].self, from: Data(try row.string("kinds").utf8))
            return LiveWorker(
                record: WorkerRecord(id: try row.string("id"), host: try row.string("host"), pid: Int32(try row.int("pid")),
                                     executable: try row.string("executable"), kinds: kinds.map(JobKind.init(rawValue:))),
                startedAt: try row.date("started_at"), lastHeartbeatAt: try row.date("last_heartbeat_at"),
                running: try row.int("running"))
        }
    }
}
