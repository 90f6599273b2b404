import FleetPostgres
import FleetSupport
import Logging
import Metrics
import ServiceLifecycle

/// Takes back, about every `interval`, the running jobs of workers whose process died: their
/// session lock is free (`WorkerLock`). A job goes back as the lease rescue puts it back (the
/// attempt counts; `WORKER_LOST` in its errors), seconds after the death instead of a lease
/// later, and the slots of limited keys its worker held free with it. The dispatcher runs it as
/// a service, not a schedule slot: any number of dispatchers may run it at once (each worker is
/// taken by one, under its lock), and a per-second cron slot would cost a slot row a second.
public struct WorkerReaper: Service {
    let driver: PostgresQueueDriver
    let interval: Duration
    let logger: Logger

    init(driver: PostgresQueueDriver, interval: Duration = .seconds(1), logger: Logger) {
        self.driver = driver
        self.interval = interval
        self.logger = logger
    }

    public init(executor: any PostgresExecutor, interval: Duration = .seconds(1), logger: Logger) {
        self.init(driver: PostgresQueueDriver(executor: executor), interval: interval, logger: logger)
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            await repeatEvery(interval) { await runOnce() }
        }
    }

    /// Returns the workers it found dead.
    @discardableResult
    public func runOnce() async -> [LostWorker] {
        do {
            let lost = try await driver.workerReapLost()
            for worker in lost {
                logger.warning("worker lost: its session ended; took its jobs back", metadata: [
                    "lost_worker": "\(worker.id)", "jobs": "\(worker.jobs.count)",
                ])
                for job in worker.jobs {
                    logger.info("job taken back from a lost worker", metadata: [
                        "job_id": "\(job.id)", "kind": "\(job.kind)", "state": "\(job.state.rawValue)", "lost_worker": "\(worker.id)",
                    ])
                    Counter(label: "fleet_jobs_rescued_total", dimensions: [("kind", job.kind.rawValue), ("reason", "worker_lost")]).increment()
                }
            }
            return lost
        } catch {
            logger.error("reaping lost workers failed", metadata: ["error": "\(error)"])
            return []
        }
    }
}
