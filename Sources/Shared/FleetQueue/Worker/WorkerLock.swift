import FleetPostgres

/// How the fleet learns in about a second that a worker process died, instead of after its
/// leases (`docs/operations.md`, "When a worker dies").
///
/// Each worker process holds a session-level advisory lock, keyed by its id, on its one LISTEN
/// connection (the notifier's, which reconnects by itself), and records on its `workers` row the
/// server run it took it on (`lock_server_start`, the server's `pg_postmaster_start_time()`). The
/// server releases the lock the moment that session ends: the process died (SIGKILL, OOM), or its
/// connection did. The dispatcher's reaper (`WorkerReaper`, `QueueDriver.workerReapLost`) then
/// finds the lock free with `pg_try_advisory_xact_lock` and takes the worker's running jobs back.
///
/// Only a record of the current server run is probed: after a restart or a failover to a standby
/// (another postmaster, another start time) every session is gone while the workers live on, and
/// no record matches until its worker's notifier has reconnected and locked again; meanwhile the
/// leases are the guarantee, as they are through a network partition (the dead session lingers on
/// the server, lock held) and for a worker whose id hashes like another's (no lock taken).
public enum WorkerLock {
    /// The lock's first key, `hashtext('wearbloom.workers')`, fixed so every version agrees on it;
    /// the second is `hashtext(worker id)`.
    public static let namespace: Int32 = 352_007_885

    /// The statement the worker's notifier runs on each new session before its LISTENs: *tries*
    /// the lock (never waits: two ids may hash alike, and then the second worker lives on its
    /// leases alone; the notifier logs it and tries again every few seconds), and once it holds
    /// it records the server run on the worker's row, creating the row if the worker has not
    /// registered yet (`workerRegister` keeps what this writes, whichever comes first). A worker
    /// whose row the reaper marked stopped while it lived (its LISTEN connection dropped) is live
    /// again.
    public static func sessionStatement(for worker: WorkerRecord) -> SessionStatement {
        SessionStatement(name: "worker lock", sql: """
            WITH locked AS MATERIALIZED (SELECT pg_try_advisory_lock(\(namespace), hashtext($1)) AS held)
            INSERT INTO workers (id, host, pid, executable, kinds, lock_server_start)
            SELECT $1, $2, $3::integer, $4, $5::text[], pg_postmaster_start_time() FROM locked WHERE held
            ON CONFLICT (id) DO UPDATE SET lock_server_start = EXCLUDED.lock_server_start, stopped_at = NULL,
                last_heartbeat_at = now()
            RETURNING id
            """, parameters: [
                worker.id, worker.host, worker.pid.postgresText, worker.executable, PostgresArray(worker.kinds.map(\.rawValue)).postgresText,
            ])
    }
}
