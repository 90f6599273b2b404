-- Completed jobs enter no index but the primary key again; dead and cancelled ones enter the
-- failed-only indexes migration 4 made (and migration 20 replaced).
DROP INDEX jobs_finished_idx;
DROP INDEX jobs_finished_state_idx;
DROP INDEX jobs_finished_kind_idx;
CREATE INDEX jobs_failed_idx ON jobs (state, id) WHERE state IN ('dead', 'cancelled');
CREATE INDEX jobs_failed_kind_idx ON jobs (state, kind, id) WHERE state IN ('dead', 'cancelled');
