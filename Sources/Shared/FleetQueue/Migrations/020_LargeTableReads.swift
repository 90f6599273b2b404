import FleetPostgres

extension QueueMigrations {
    /// Counts of finished jobs kept as jobs end, are retried and are deleted, so the reads that
    /// counted finished rows read a few rows instead (`docs/queue.md`, "A large table"): `stats`
    /// counted its window from `jobs_finished_idx` (280 ms for an hour of 417,000 jobs under load),
    /// the console's overview the newest 30,000 jobs (an undercount above 8 jobs/s, 260 ms), its
    /// dead-job groups every dead job kept (seven days: 390 ms for 540,000).
    ///
    /// `job_counts` holds how many finished jobs there are per minute of `finished_at`, kind,
    /// state and latest error code (kept for dead and cancelled jobs: the dead-job groups and
    /// `DEPENDENCY_FAILED` need it), and `dead_job_counts` how many dead jobs per kind and code.
    /// Triggers on `jobs` record every change to them as rows of `job_count_changes`, whichever
    /// statement makes it (an ending, a retry, a prune, an operator's delete, a job inserted
    /// finished), so the counts are exact whatever the path: after each `UPDATE` or `DELETE`
    /// statement, one row per minute, kind, state and code it changed, from its transition
    /// tables (batched endings add a row or two per statement, claims none); after each insert of a
    /// finished job, one row (an enqueue inserts none and pays the trigger's `WHEN` test alone).
    /// A change is an insert into a table without indexes: no row lock, so jobs ending at once
    /// never wait for each other's commit on a shared counter row. The `counts.fold` task
    /// (`JobCountFolder`) moves the changes into the two count tables every few seconds; a read
    /// adds the changes not folded yet, so it is exact between folds too.
    ///
    /// `jobs.list` pages finished jobs of a state, or of a state and kind, from indexes over every
    /// finished state (they covered only `dead` and `cancelled`): a page of completed jobs of a
    /// kind walks its own entries, not every newer job on the primary key (28 ms on 1,000,000 jobs
    /// whose newest 100,000 were of another kind). Keyed on `-id`, newest first, an order the
    /// primary key cannot give, so the planner cannot trade them for it (`listStatement`). One
    /// more entry in each for a completed job, written by the statement that ends it.
    static let largeTableReads = Migration(version: 20, name: "large table reads", sql: """
        DROP INDEX jobs_failed_idx;
        DROP INDEX jobs_failed_kind_idx;
        DROP INDEX jobs_dead_code_idx;
        CREATE INDEX jobs_finished_state_idx ON jobs (state, (-id)) WHERE state IN ('completed', 'dead', 'cancelled');
        CREATE INDEX jobs_finished_kind_idx ON jobs (state, kind, (-id)) WHERE state IN ('completed', 'dead', 'cancelled');
        CREATE INDEX jobs_dead_code_idx ON jobs (last_error_code, (-id)) WHERE state = 'dead';

        CREATE TABLE job_counts (
            minute timestamptz NOT NULL,
            kind text NOT NULL,
            state job_state NOT NULL,
            code text,
            n bigint NOT NULL
        );
        CREATE UNIQUE INDEX job_counts_key_idx ON job_counts (minute, kind, state, code) NULLS NOT DISTINCT;
        CREATE TABLE dead_job_counts (
            kind text NOT NULL,
            code text,
            n bigint NOT NULL
        );
        CREATE UNIQUE INDEX dead_job_counts_key_idx ON dead_job_counts (kind, code) NULLS NOT DISTINCT;
        CREATE TABLE job_count_changes (
            minute timestamptz NOT NULL,
            kind text NOT NULL,
            state job_state NOT NULL,
            code text,
            delta bigint NOT NULL
        ) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);

        -- What a finished job counts under: its minute, kind, state, and code unless it completed.
        CREATE FUNCTION jobs_count_changed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_LEVEL = 'ROW' THEN
                INSERT INTO job_count_changes (minute, kind, state, code, delta)
                VALUES (date_trunc('minute', NEW.finished_at), NEW.kind, NEW.state,
                        CASE WHEN NEW.state = 'completed' THEN NULL ELSE NEW.last_error_code END, 1);
            ELSIF TG_OP = 'UPDATE' THEN
                INSERT INTO job_count_changes (minute, kind, state, code, delta)
                SELECT minute, kind, state, code, sum(delta) FROM (
                    SELECT date_trunc('minute', finished_at) AS minute, kind, state,
                           CASE WHEN state = 'completed' THEN NULL ELSE last_error_code END AS code, -1 AS delta
                    FROM old_jobs WHERE finished_at IS NOT NULL AND state IN ('completed', 'dead', 'cancelled')
                    UNION ALL
                    SELECT date_trunc('minute', finished_at), kind, state,
                           CASE WHEN state = 'completed' THEN NULL ELSE last_error_code END, 1
                    FROM new_jobs WHERE finished_at IS NOT NULL AND state IN ('completed', 'dead', 'cancelled')
                ) AS changed
                GROUP BY 1, 2, 3, 4 HAVING sum(delta) <> 0;
            ELSE
                INSERT INTO job_count_changes (minute, kind, state, code, delta)
                SELECT date_trunc('minute', finished_at), kind, state,
                       CASE WHEN state = 'completed' THEN NULL ELSE last_error_code END, -count(*)
                FROM old_jobs WHERE finished_at IS NOT NULL AND state IN ('completed', 'dead', 'cancelled')
                GROUP BY 1, 2, 3, 4;
            END IF;
            RETURN NULL;
        END $$;

        CREATE FUNCTION jobs_counts_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            DELETE FROM job_count_changes;
            DELETE FROM job_counts;
            DELETE FROM dead_job_counts;
            RETURN NULL;
        END $$;

        CREATE TRIGGER jobs_counted_insert AFTER INSERT ON jobs FOR EACH ROW
            WHEN (NEW.finished_at IS NOT NULL AND NEW.state IN ('completed', 'dead', 'cancelled'))
            EXECUTE FUNCTION jobs_count_changed();
        CREATE TRIGGER jobs_counted_update AFTER UPDATE ON jobs REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs
            FOR EACH STATEMENT EXECUTE FUNCTION jobs_count_changed();
        CREATE TRIGGER jobs_counted_delete AFTER DELETE ON jobs REFERENCING OLD TABLE AS old_jobs
            FOR EACH STATEMENT EXECUTE FUNCTION jobs_count_changed();
        CREATE TRIGGER jobs_counted_truncate AFTER TRUNCATE ON jobs FOR EACH STATEMENT
            EXECUTE FUNCTION jobs_counts_truncated();

        -- The triggers above lock out writes to `jobs` until this commits: the counts are exact.
        INSERT INTO job_counts (minute, kind, state, code, n)
        SELECT date_trunc('minute', finished_at), kind, state, CASE WHEN state = 'completed' THEN NULL ELSE last_error_code END, count(*)
        FROM jobs WHERE finished_at IS NOT NULL AND state IN ('completed', 'dead', 'cancelled')
        GROUP BY 1, 2, 3, 4;
        INSERT INTO dead_job_counts (kind, code, n)
        SELECT kind, last_error_code, count(*) FROM jobs WHERE state = 'dead' AND finished_at IS NOT NULL GROUP BY 1, 2;
        """)
}
