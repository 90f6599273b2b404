import FleetPostgres
import Logging
import Synchronization

/// Which worker process runs the lease rescue (`Rescuer`): the one whose LISTEN session holds a
/// session-level advisory lock under a fixed key, as River runs its maintenance on an elected
/// leader. Each rescue walks the expired end of `jobs_lease_idx`, and under a held snapshot every
/// dead entry of the jobs finished since it began (`docs/reliability.md`, "A held snapshot"): one
/// walk per period for the fleet instead of one per worker.
///
/// Every worker's notifier tries the lock on each session (`pg_try_advisory_lock`, which never
/// waits) every `period` until it holds it: one holds it, the others keep trying. The server
/// releases it the moment the leader's session ends (the process died, its connection did, it
/// stopped), and the next worker to try takes it within a period, so a dead leader's expired
/// leases are rescued as soon as they would have been by any worker's own rescuer: the lease,
/// then at most a period (the leader's next run). A poll-only notifier has no session to hold
/// it: such a worker runs the rescue itself, every period.
final class MaintenanceLeader: Sendable {
    /// The lock's keys: `hashtext('wearbloom.maintenance')` and 0, fixed so every version agrees.
    static let lockKey: (Int32, Int32) = (-389_342_621, 0)

    private let notifier: Notifier
    private let statement: SessionStatement
    private let logger: Logger
    /// Whether it led when last asked: a change is logged.
    private let led = Mutex(false)

    /// Tried again every `period` until held.
    init(notifier: Notifier, period: Duration, logger: Logger) {
        self.notifier = notifier
        self.logger = logger
        statement = SessionStatement(
            name: "maintenance leader", sql: "SELECT 1 WHERE pg_try_advisory_lock(\(Self.lockKey.0), \(Self.lockKey.1))",
            parameters: [], retry: period, contended: true)
        notifier.runOnEachSession(statement)
    }

    /// Whether this process runs the rescue now; logs when that changed.
    func leads() -> Bool {
        let leading = notifier.isPollOnly || notifier.sessionHolds(statement)
        let changed = led.withLock { led in
            defer { led = leading }
            return led != leading
        }
        if changed && leading {
            logger.info("leading the lease rescue")
        } else if changed {
            logger.info("no longer leading the lease rescue: its LISTEN session ended")
        }
        return leading
    }
}
