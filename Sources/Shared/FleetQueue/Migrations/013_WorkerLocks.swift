import FleetPostgres

extension QueueMigrations {
    /// A worker found dead in about a second instead of after its leases: each worker process
    /// holds a session-level advisory lock on its LISTEN connection, which the server releases the
    /// moment that session ends, and the dispatcher's reaper takes back the jobs of a worker whose
    /// lock is free (`WorkerLock`, `docs/operations.md`, "When a worker dies"). A free lock proves
    /// the death only on the server run the lock was taken on: a restart or a failover ends every
    /// session while the workers live on. So the row records that run (`pg_postmaster_start_time()`
    /// when the lock was taken), and the reaper probes only rows of the current run; the others
    /// wait for their worker to lock again, or for their leases. NULL: no lock taken (an older
    /// worker, or an id hashing like another's). A nullable column without a default: catalogue
    /// only, no rewrite. The index holds the few rows the reaper probes every second (live,
    /// locked), however many stopped rows accumulate.
    static let workerLocks = Migration(version: 13, name: "worker locks", sql: """
        ALTER TABLE workers ADD COLUMN lock_server_start timestamptz;
        CREATE INDEX workers_locked_idx ON workers (lock_server_start) WHERE stopped_at IS NULL;
        """)
}
