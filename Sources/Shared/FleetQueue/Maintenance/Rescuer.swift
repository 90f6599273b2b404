import FleetPostgres
import Logging
import Metrics

/// Puts back running jobs whose lease expired: their worker crashed, hung or was cut off. A
/// worker that died while the database stayed up is found sooner, by its lock (`WorkerReaper`);
/// the lease is the guarantee behind it.
/// The attempt counts, so a job that kills every worker that runs it ends `dead`. Safe to
/// run from every process at once: rows are taken with SKIP LOCKED and re-checked.
public struct Rescuer: Sendable {
    let driver: PostgresQueueDriver
    let logger: Logger
    let batch: Int

    init(driver: PostgresQueueDriver, logger: Logger, batch: Int = 1_000) {
        self.driver = driver
        self.logger = logger
        self.batch = batch
    }

    public init(executor: any PostgresExecutor, logger: Logger, batch: Int = 1_000) {
        self.init(driver: PostgresQueueDriver(executor: executor), logger: logger, batch: batch)
    }

    /// Returns how many jobs it rescued.
    @discardableResult
    public func runOnce() async -> Int {
        do {
            let rescued = try await driver.jobRescueExpired(limit: batch)
            for job in rescued {
                logger.warning("rescued job with expired lease", metadata: [
                    "job_id": "\(job.id)", "kind": "\(job.kind)", "state": "\(job.state.rawValue)",
                ])
                Counter(label: "fleet_jobs_rescued_total", dimensions: [("kind", job.kind.rawValue), ("reason", "lease_expired")]).increment()
            }
            return rescued.count
        } catch {
            logger.error("rescue failed", metadata: ["error": "\(error)"])
            return 0
        }
    }
}
