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

    /// Returns how many jobs it deleted.
    @discardableResult
    public func runOnce(batch: Int = 10_000) async throws -> Int {
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
