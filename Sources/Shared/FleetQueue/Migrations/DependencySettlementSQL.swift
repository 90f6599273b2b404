import FleetPostgres
import FleetSupport

/// SQL the dependency migrations share (17's row trigger, 18's set-based settlement, 21's locking order), written once.
enum DependencySettlementSQL {
    /// The `WHEN` of the row trigger that notices a job with dependents ending.
    static let endedWithDependents = """
        NEW.has_dependents AND NEW.state IN ('completed', 'dead', 'cancelled') AND OLD.state IN ('waiting', 'available', 'running')
        """

    /// `jobs_settle_dependencies(ended)`, which settles the dependents of the jobs `ended` (see
    /// migration 18). `lockingInIDOrder` (migration 21): the dependents' rows are locked in id
    /// order before any is updated. Without it each statement updated them in its join's order, so
    /// two transactions ending dependencies that share dependents (two renders after the same
    /// body photo and the same cut-out) could each hold a row the other waited for: PostgreSQL broke
    /// the deadlock after `deadlock_timeout`, failing one of the two outcome batches, which was
    /// written again a second later.
    static func settleFunction(lockingInIDOrder: Bool) -> String {
        let blamed = lockingInIDOrder ? "blamed_locked" : "blamed"
        return """
        CREATE OR REPLACE FUNCTION jobs_settle_dependencies(ended bigint[]) RETURNS void LANGUAGE plpgsql AS $$
        DECLARE
            completed_ids bigint[];
            failed_ids bigint[];
            settled bigint;
        BEGIN
            -- The ended jobs' states as the ending statements left them: each kind of settlement
            -- runs only when it has something to settle (most statements end only completions).
            SELECT array_agg(id) FILTER (WHERE state = 'completed'), array_agg(id) FILTER (WHERE state IN ('dead', 'cancelled'))
            INTO completed_ids, failed_ids FROM jobs WHERE id = ANY (ended);
            -- Completed: each waiting dependent's count goes down by the number of its dependencies
            -- ended here, under its row lock. Two transactions completing two dependencies of one
            -- job both update its row: the second waits for the first's lock, then reads the row as
            -- the first left it (READ COMMITTED re-checks an updated row), so the count reaches zero
            -- exactly once.
            IF completed_ids IS NOT NULL THEN\(lockingInIDOrder ? lockCompletedDependents : "")
                WITH edges AS (
                    DELETE FROM job_dependencies WHERE depends_on = ANY (completed_ids) RETURNING job_id
                ),
                per_dependent AS (
                    SELECT job_id AS id, count(*)::integer AS completed FROM edges GROUP BY job_id
                ),
                counted AS (
                    UPDATE jobs SET waiting_on = jobs.waiting_on - per_dependent.completed,
                        state = CASE WHEN jobs.waiting_on = per_dependent.completed THEN 'available'::job_state ELSE 'waiting'::job_state END
                    FROM per_dependent WHERE jobs.id = per_dependent.id AND jobs.state = 'waiting'
                    RETURNING jobs.kind, jobs.state
                )
                SELECT (SELECT count(nextval('job_dependency_releases')) FROM counted WHERE state = 'available')
                     + (SELECT count(\(QueueChannel.jobs.notifySQL(payload: "kind")))
                        FROM (SELECT DISTINCT kind FROM counted WHERE state = 'available') AS released)
                INTO settled;
            END IF;

            -- Dead or cancelled: every waiting job downstream at once (one statement, not a level
            -- per trigger, so a long chain does not nest), each naming the job it ran after and the
            -- one that failed.
            IF failed_ids IS NOT NULL THEN
                WITH RECURSIVE failed_jobs AS (
                    SELECT id, kind, state FROM jobs WHERE id = ANY (failed_ids)
                ),
                doomed(id, after, root) AS (
                    SELECT job_dependencies.job_id, failed.id, failed.id
                    FROM failed_jobs AS failed JOIN job_dependencies ON job_dependencies.depends_on = failed.id
                    UNION
                    SELECT job_dependencies.job_id, doomed.id, doomed.root
                    FROM doomed JOIN job_dependencies ON job_dependencies.depends_on = doomed.id
                ),
                blamed AS (
                    SELECT DISTINCT ON (doomed.id) doomed.id, doomed.after, failed.id AS root, failed.kind AS root_kind, failed.state AS root_state
                    FROM doomed JOIN failed_jobs AS failed ON failed.id = doomed.root ORDER BY doomed.id, doomed.after <> doomed.root, doomed.after
                ),
        \(lockingInIDOrder ? lockDoomed : "")
                unlinked AS (
                    DELETE FROM job_dependencies WHERE depends_on = ANY (failed_ids)
                ),
                cancelled AS (
                    \(cancelWaiting(
                        from: blamed, after: "\(blamed).after", root: "\(blamed).root", rootKind: "\(blamed).root_kind", rootState: "\(blamed).root_state"))
                ),
                notified AS (\(PostgresQueueDriver.notifyFinished(from: "cancelled")))
                SELECT (SELECT count(nextval('job_dependency_failures')) FROM cancelled) + (SELECT sent FROM notified) INTO settled;
            END IF;
        END $$;
        """
    }

    /// Locks the waiting dependents of `completed_ids` in id order; the settling statement
    /// after it (a fresh snapshot) finds them locked by its own transaction.
    private static let lockCompletedDependents = """

                PERFORM 1 FROM jobs WHERE id IN (SELECT job_id FROM job_dependencies WHERE depends_on = ANY (completed_ids))
                    AND state = 'waiting' ORDER BY id FOR NO KEY UPDATE;
        """

    /// The doomed jobs locked in id order (the locking sits above the sort), and `blamed` cut
    /// down to those the lock found still waiting.
    private static let lockDoomed = """
                locked AS (
                    SELECT id FROM jobs WHERE id IN (SELECT id FROM blamed) AND state = 'waiting' ORDER BY id FOR NO KEY UPDATE
                ),
                blamed_locked AS (
                    SELECT blamed.* FROM blamed JOIN locked USING (id)
                ),
        """

    /// The `UPDATE` that ends the waiting jobs of `source` (a relation with an `id` column)
    /// `cancelled` with `DEPENDENCY_FAILED`: `after` is the job each ran after, `root` the job
    /// whose ending failed them (with its kind and state), all SQL expressions. Returns what
    /// `PostgresQueueDriver.notifyFinished(from:)` reads.
    static func cancelWaiting(from source: String, after: String, root: String, rootKind: String, rootState: String) -> String {
        """
        UPDATE jobs SET state = 'cancelled', waiting_on = 0, finished_at = now(),
            errors = jobs.errors || jsonb_build_array(jsonb_build_object(
                'attempt', jobs.attempt, 'at', now(), 'code', '\(JobErrorCode.dependencyFailed)',
                'error', CASE WHEN \(after) = \(root)
                    THEN 'dependency failed: job ' || \(root) || ' (' || \(rootKind) || ') ended ' || \(rootState)
                    ELSE 'dependency failed: job ' || \(after) || ' was cancelled because job ' || \(root)
                         || ' (' || \(rootKind) || ') ended ' || \(rootState) END)),
            last_error_code = '\(JobErrorCode.dependencyFailed)'
        FROM \(source) WHERE jobs.id = \(source).id AND jobs.state = 'waiting'
        RETURNING jobs.id, jobs.state, jobs.finish_watched, jobs.limit_keys
        """
    }
}
