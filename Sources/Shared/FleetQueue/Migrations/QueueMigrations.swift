import FleetPostgres

/// The queue's migrations, one file each (`docs/schema.md`): the jobs, their workers, the
/// schedule's slots, pauses and the audit trail, limits, and the columns other modules' features
/// keep on a job.
public enum QueueMigrations {
    public static let all = [
        jobQueue, scheduleSlots, jobControl, concurrencyLimits, jobCallbackColumn, consoleIndexes, jobTraces, workerLocks, finishedJobsIndex,
        finishWatches, waitingState, jobDependencies, setBasedDependencySettlement, largeTableReads, orderedDependencySettlement,
        runningJobsByKind,
    ]
}
