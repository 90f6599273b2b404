import FleetPostgres

extension QueueMigrations {
    /// Fleet-wide limits on jobs that carry limit keys (`docs/queue.md`, "Limits"): at most so many
    /// running at once and/or so many starts per window, per key, enforced by the claim.
    static let concurrencyLimits = Migration(version: 5, name: "concurrency limits", sql: """
        -- NULL for jobs without keys (no rewrite of the table: a column without a default).
        ALTER TABLE jobs ADD COLUMN limit_keys text[];

        -- The running jobs that count against a limit: what the limited claim counts.
        CREATE INDEX jobs_running_limited_idx ON jobs (limit_keys) WHERE state = 'running' AND limit_keys IS NOT NULL;

        -- One rule per key (`provider:fal-fashn`), or per key prefix ending in `*` (`user:*`: each
        -- key under it has the limit on its own). Rows, so operators change them at run time.
        CREATE TABLE queue_limits (
            key text PRIMARY KEY CHECK (key ~ '^[A-Za-z0-9._:-]{1,100}[*]?$'),
            max_running integer CHECK (max_running >= 0),
            rate integer CHECK (rate >= 0),
            rate_window_seconds double precision NOT NULL DEFAULT 60 CHECK (rate_window_seconds > 0 AND rate_window_seconds <= 3600),
            updated_by text NOT NULL DEFAULT 'fleet',
            updated_at timestamptz NOT NULL DEFAULT now(),
            -- Lowered after the provider said 429: the rate was halved from `throttled_from` at
            -- `throttled_at` and climbs back by a tenth of it every 30 s (ConcurrencyLimit.effectiveRate).
            throttled_rate integer CHECK (throttled_rate >= 1),
            throttled_from integer,
            throttled_at timestamptz,
            CHECK (max_running IS NOT NULL OR rate IS NOT NULL)
        );

        -- Starts of jobs whose keys have a rule, for rates over a sliding window (and the rate a
        -- throttle halves); the claim deletes what no window can see any more.
        CREATE TABLE limit_starts (
            key text NOT NULL,
            started_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX limit_starts_key_idx ON limit_starts (key, started_at);
        """)
}
