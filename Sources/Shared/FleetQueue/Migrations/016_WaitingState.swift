import FleetPostgres

extension QueueMigrations {
    /// The state of a job that runs after other jobs and waits for them (`docs/queue.md`,
    /// "Dependencies"). A version of its own: PostgreSQL refuses a value added to an enum in the
    /// transaction that uses it, and version 17's index, constraint and triggers use it.
    static let waitingState = Migration(version: 16, name: "waiting state", sql: """
        ALTER TYPE job_state ADD VALUE IF NOT EXISTS 'waiting';
        """)
}
