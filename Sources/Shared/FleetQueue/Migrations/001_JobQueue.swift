import FleetPostgres

extension QueueMigrations {
    /// The jobs, claimed from a partial index of the available ones, and the workers that run them.
    static let jobQueue = Migration(version: 1, name: "job queue", sql: """
        CREATE TYPE job_state AS ENUM ('available', 'running', 'completed', 'dead', 'cancelled');

        CREATE TABLE jobs (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            kind text NOT NULL,
            queue text NOT NULL DEFAULT 'default',
            state job_state NOT NULL DEFAULT 'available',
            priority smallint NOT NULL DEFAULT 2 CHECK (priority BETWEEN 0 AND 9),
            attempt integer NOT NULL DEFAULT 0,
            max_attempts integer NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
            run_at timestamptz NOT NULL DEFAULT now(),
            payload jsonb NOT NULL DEFAULT '{}',
            result jsonb,
            errors jsonb NOT NULL DEFAULT '[]',
            idempotency_key text,
            lease_owner text,
            lease_expires_at timestamptz,
            cancel_requested_at timestamptz,
            created_at timestamptz NOT NULL DEFAULT now(),
            started_at timestamptz,
            finished_at timestamptz,
            -- A lease exactly while running: "lease_owner = me" alone proves the job is running.
            CONSTRAINT jobs_lease_iff_running CHECK ((state = 'running') = (lease_owner IS NOT NULL))
        ) WITH (fillfactor = 85, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_cost_delay = 0);

        -- The claim reads only this partial index: finished rows never slow it down.
        CREATE INDEX jobs_claim_idx ON jobs (kind, priority, run_at, id) WHERE state = 'available';
        -- The rescuer finds expired leases here.
        CREATE INDEX jobs_lease_idx ON jobs (lease_expires_at) WHERE state = 'running';
        -- Enqueueing a key twice returns the first job.
        CREATE UNIQUE INDEX jobs_idempotency_key_idx ON jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;

        CREATE TABLE workers (
            id text PRIMARY KEY,
            host text NOT NULL,
            pid integer NOT NULL,
            executable text NOT NULL,
            kinds text[] NOT NULL,
            started_at timestamptz NOT NULL DEFAULT now(),
            last_heartbeat_at timestamptz NOT NULL DEFAULT now(),
            stopped_at timestamptz
        );
        """)
}
