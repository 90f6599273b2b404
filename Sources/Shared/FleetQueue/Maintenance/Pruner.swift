import FleetPostgres
import FleetSupport
import Logging
import Synchronization

/// Deletes finished jobs past their retention, and workers silent for a day, in batches
/// so no single statement holds locks for long; then the finished jobs' counts that reached zero.
public struct Pruner: Sendable {
    let driver: PostgresQueueDriver
    let retention: Retention
    let frontier: PruneFrontier
    let logger: Logger

    init(driver: PostgresQueueDriver, retention: Retention = Retention(), frontier: PruneFrontier = PruneFrontier(), logger: Logger) {
        self.driver = driver
        self.retention = retention
        self.frontier = frontier
        self.logger = logger
    }

    public init(executor: any PostgresExecutor, retention: Retention = Retention(), frontier: PruneFrontier = PruneFrontier(), logger: Logger) {
        self.init(driver: PostgresQueueDriver(executor: executor), retention: retention, frontier: frontier, logger: logger)
    }

    /// Rows deleted per statement, each its own commit. Each commit's WAL is flushed before the
    /// claims' and enqueues' behind it: batches of 10,000 took the enqueue-to-start p99 beside a
    /// prune to 2.3–5.6× of the same without it, batches of 1,000 to 1.1–2.4× (median 1.3×) at
    /// 100,000 rows/s, some 500 times what a fleet finishing 200 jobs/s needs
    /// (`docs/benchmarks.md`, "A large table").
    public static let defaultBatch = 1_000

    /// Returns how many jobs it deleted.
    @discardableResult
    public func runOnce(batch: Int = defaultBatch) async throws -> Int {
        var total = 0
        var from = frontier.start()
        while true {
            let pruned = try await driver.jobDeleteFinished(retention, limit: batch, from: from)
            total += pruned.deleted
            if let newest = pruned.newest { from = newest }
            if pruned.deleted < batch { break }
        }
        frontier.reached(from)
        let workers = try await driver.workerDeleteStale(olderThan: .seconds(86_400))
        _ = try await driver.jobCountsDropEmpty()
        if total > 0 || workers > 0 {
            logger.info("pruned", metadata: ["jobs": "\(total)", "workers": "\(workers)"])
        }
        return total
    }
}

/// Where the pruner's delete starts in `jobs_finished_idx`: at the newest `finished_at` it
/// deleted, or at the oldest finished job.
///
/// Every deleted job leaves its entry in the index until vacuum removes it. Normally the next
/// scan marks such entries dead and skips them, but while a session holds an older snapshot none
/// may be marked, so a delete from the oldest finished job visits the table for every job
/// deleted since the snapshot began: each batch of a run walked every earlier batch's rows, and
/// under a six-minute hold at 1,500 jobs/s the pruner spent 29 s of every minute doing so. From
/// the frontier each batch walks only what it deletes.
///
/// Behind the frontier lie the jobs whose retention is longer than the shortest (dead jobs are
/// kept longer than completed ones by default) and any that committed a `finished_at` older than
/// the retention late: a run from the oldest finished job, every `restartEvery`, deletes them,
/// so a job outlives its retention by at most that.
public final class PruneFrontier: Sendable {
    public static let defaultRestart = Duration.seconds(60)

    private struct State {
        var from: Int64?
        var restartedAt: Double?
    }

    private let restartEvery: Double
    private let clock: @Sendable () -> Double
    private let state = Mutex(State())

    /// `restartEvery`: how often a run starts at the oldest finished job; `clock` in seconds.
    public init(restartEvery: Duration = defaultRestart, clock: @escaping @Sendable () -> Double = ClaimFrontiers.monotonicSeconds) {
        self.restartEvery = restartEvery.seconds
        self.clock = clock
    }

    /// Where this run starts (microseconds since 1970; nil: at the oldest finished job).
    func start() -> Int64? {
        let now = clock()
        return state.withLock { state in
            guard let restartedAt = state.restartedAt, now - restartedAt < restartEvery else {
                state.restartedAt = now
                return nil
            }
            return state.from
        }
    }

    /// Records where the run's last batch ended: the newest `finished_at` it deleted.
    func reached(_ from: Int64?) {
        state.withLock { state in
            if let from { state.from = max(from, state.from ?? from) }
        }
    }
}
