import FleetPostgres

extension QueueMigrations {
    /// Whether someone waits for the job's end (`wait`): only then, or when the job holds a limited
    /// slot that workers wait for, does its end notify `fleet_jobs_finished`. A notification inside
    /// the ending commit takes PostgreSQL's notify lock through that commit's flush; sent for every
    /// job, it put every commit of the fleet in one line for waiters that mostly did not exist.
    static let finishWatches = Migration(version: 15, name: "finish watches", sql: """
        ALTER TABLE jobs ADD COLUMN finish_watched boolean NOT NULL DEFAULT false;
        """)
}
