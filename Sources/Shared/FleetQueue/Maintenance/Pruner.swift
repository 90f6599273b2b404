import Logging

/// Deletes finished jobs past their retention, and workers silent for a day, in batches
/// so no single statement holds locks for long; then the finished jobs' counts that reached zero.
public struct Pruner: Sendable {
    let driver: any QueueDriver
    let retention: Retention
    let logger: Logger

    public init(driver: any QueueDriver, retention: Retention = Retention(), logger: Logger) {
        self.driver = driver
        self.retention = retention
        self.logger = logger
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
        while true {
            let deleted = try await driver.jobDeleteFinished(retention, limit: batch)
            total += deleted
            if deleted < batch { break }
        }
        let workers = try await driver.workerDeleteStale(olderThan: .seconds(86_400))
        _ = try await driver.jobCountsDropEmpty()
        if total > 0 || workers > 0 {
            logger.info("pruned", metadata: ["jobs": "\(total)", "workers": "\(workers)"])
        }
        return total
    }
}
