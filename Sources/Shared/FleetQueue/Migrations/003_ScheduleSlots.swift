import FleetPostgres

extension QueueMigrations {
    /// One row per schedule slot a dispatcher claimed: the primary key makes each slot of each
    /// entry run once however many dispatchers race for it (`docs/schedule.md`).
    static let scheduleSlots = Migration(version: 3, name: "schedule slots", sql: """
        CREATE TABLE schedule_slots (
            entry text NOT NULL,
            slot_at timestamptz NOT NULL,
            claimed_by text NOT NULL,
            claimed_at timestamptz NOT NULL DEFAULT now(),
            -- The job a job-kind entry enqueued, in the claim's transaction.
            job_id bigint,
            -- When a built-in task ended, and its error if it failed.
            finished_at timestamptz,
            error text,
            PRIMARY KEY (entry, slot_at)
        );
        -- Old slots are pruned by age, whatever their entry.
        CREATE INDEX schedule_slots_slot_at_idx ON schedule_slots (slot_at);
        """)
}
