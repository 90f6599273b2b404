-- No finished-job counts: the statements on jobs run no counting trigger.
DROP TRIGGER jobs_counted_insert ON jobs;
DROP TRIGGER jobs_counted_update ON jobs;
DROP TRIGGER jobs_counted_delete ON jobs;
DROP TRIGGER jobs_counted_truncate ON jobs;
