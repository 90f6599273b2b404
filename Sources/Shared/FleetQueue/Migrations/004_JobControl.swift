import FleetPostgres

extension QueueMigrations {
    /// Operators' job control (`docs/schema.md`): pauses the claim honours, the audit trail, and
    /// the indexes `jobs.list` pages on. (Released with the access tokens, FleetAccess's part of
    /// version 4.)
    static let jobControl = Migration(version: 4, name: "job control", sql: """
        CREATE TABLE queue_pauses (
            scope text NOT NULL CHECK (scope IN ('kind', 'queue')),
            name text NOT NULL,
            paused_by text NOT NULL,
            paused_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (scope, name)
        );

        CREATE TABLE operator_audit (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            at timestamptz NOT NULL DEFAULT now(),
            -- The access token's name, or unix-socket.
            actor text NOT NULL,
            action text NOT NULL,
            -- The job id, the filter or the paused target.
            target jsonb NOT NULL,
            affected bigint NOT NULL
        );

        -- jobs.list pages, newest first, over the jobs operators look for: the dead and cancelled
        -- ones, by state, by state and kind, and dead ones by their last error's code. Partial
        -- indexes that only a failure writes: enqueue, claim and completion never touch them.
        -- (Queued, running and completed jobs are paged by walking the primary key backwards:
        -- they are recent or dense.)
        CREATE INDEX jobs_failed_idx ON jobs (state, id) WHERE state IN ('dead', 'cancelled');
        CREATE INDEX jobs_failed_kind_idx ON jobs (state, kind, id) WHERE state IN ('dead', 'cancelled');
        CREATE INDEX jobs_dead_code_idx ON jobs ((errors -> -1 ->> 'code'), id) WHERE state = 'dead';
        """)
}
