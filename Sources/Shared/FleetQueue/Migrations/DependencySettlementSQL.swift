import FleetPostgres

/// SQL the dependency migrations share (17's row trigger, 18's set-based settlement), written once.
enum DependencySettlementSQL {
    /// The `WHEN` of the row trigger that notices a job with dependents ending.
    static let endedWithDependents = """
        NEW.has_dependents AND NEW.state IN ('completed', 'dead', 'cancelled') AND OLD.state IN ('waiting', 'available', 'running')
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
