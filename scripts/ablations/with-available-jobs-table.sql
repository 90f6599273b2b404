-- What keeping the available jobs in a small table of their own would cost the queue's writes
-- (docs/queue.md, "A large table"): the table and its claim index, kept by statement triggers on
-- jobs from their transition tables, as the finished-job counts are. The claim still reads
-- jobs_claim_idx, so a run measures the upkeep alone, not what the claim would save.
CREATE TABLE jobs_available (
    id bigint PRIMARY KEY,
    kind text NOT NULL,
    priority smallint NOT NULL,
    run_at timestamptz NOT NULL
);
CREATE INDEX jobs_available_claim_idx ON jobs_available (kind, priority, run_at, id);

CREATE FUNCTION jobs_available_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO jobs_available SELECT id, kind, priority, run_at FROM new_jobs WHERE state = 'available';
    RETURN NULL;
END $$;

CREATE FUNCTION jobs_available_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- The ids as an array: joined to the transition tables (no statistics), the delete scanned the
    -- whole table on every claim.
    DELETE FROM jobs_available WHERE id = ANY (ARRAY(
        SELECT o.id FROM old_jobs o JOIN new_jobs n ON n.id = o.id WHERE o.state = 'available' AND n.state <> 'available'));
    INSERT INTO jobs_available SELECT n.id, n.kind, n.priority, n.run_at FROM new_jobs n JOIN old_jobs o ON o.id = n.id
        WHERE n.state = 'available' AND o.state <> 'available';
    RETURN NULL;
END $$;

CREATE FUNCTION jobs_available_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM jobs_available WHERE id = ANY (ARRAY(SELECT id FROM old_jobs WHERE state = 'available'));
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_available_insert AFTER INSERT ON jobs REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_available_inserted();
CREATE TRIGGER jobs_available_update AFTER UPDATE ON jobs REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_available_updated();
CREATE TRIGGER jobs_available_delete AFTER DELETE ON jobs REFERENCING OLD TABLE AS old_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_available_deleted();
