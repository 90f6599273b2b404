import FleetPostgres

/// Folds the count changes the triggers on `jobs` record into the finished jobs' counts
/// (`docs/queue.md`, "A large table"), so a read of `stats`, the console's overview or its
/// dead-job groups sums a few rows plus the few seconds of changes since the last fold.
public struct JobCountFolder: Sendable {
    let driver: PostgresQueueDriver

    init(driver: PostgresQueueDriver) {
        self.driver = driver
    }

    public init(executor: any PostgresExecutor) {
        self.init(driver: PostgresQueueDriver(executor: executor))
    }

    /// Returns how many changes it folded.
    @discardableResult
    public func runOnce() async throws -> Int { try await driver.jobFoldCounts() }
}
