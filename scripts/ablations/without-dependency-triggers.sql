-- No dependency settlement: a job's end tests no dependents and calls no settling function.
DROP TRIGGER jobs_dependents ON jobs;
DROP TRIGGER jobs_dependents_settle ON jobs;
