import FleetPostgres
import Logging

/// Ends as `dead`, with a clear error, queued jobs of a kind no part of this fleet handles
/// (written straight into the table, or by a newer release). The grace period leaves a
/// rolling deploy time to bring up the workers of a new kind.
public struct UnknownKindSweeper: Sendable {
    let driver: PostgresQueueDriver
    let knownKinds: Set<JobKind>
    let grace: Duration
    let logger: Logger

    init(driver: PostgresQueueDriver, knownKinds: KnownKinds, grace: Duration = .seconds(600), logger: Logger) {
        self.driver = driver
        self.knownKinds = knownKinds.kinds
        self.grace = grace
        self.logger = logger
    }

    public init(executor: any PostgresExecutor, knownKinds: KnownKinds, grace: Duration = .seconds(600), logger: Logger) {
        self.init(driver: PostgresQueueDriver(executor: executor), knownKinds: knownKinds, grace: grace, logger: logger)
    }

    @discardableResult
    public func runOnce() async throws -> [Int64] {
        let killed = try await driver.jobKillUnknownKinds(known: knownKinds, grace: grace)
        if !killed.isEmpty { logger.error("unknown job kinds ended dead", metadata: ["job_ids": "\(killed)"]) }
        return killed
    }
}
