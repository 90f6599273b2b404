import FleetPostgres
import FleetSupport
import Foundation
import Logging
import Metrics
import ServiceLifecycle

/// Queue depth and lag per kind as gauges, for `/metrics` (the same numbers as `dispatcher stats`):
/// - `fleet_queue_jobs{kind,state}`: `due`, `scheduled` (delayed or backing off), `running`,
///   `waiting` (for the jobs they run after)
/// - `fleet_queue_retrying_jobs{kind}`: waiting for another attempt after a failure
/// - `fleet_queue_oldest_due_seconds{kind}`: how long the oldest due job has waited (0: none)
/// - `fleet_queue_dead_last_hour{kind}`: jobs ended `dead` in the last hour, by whoever ended them
/// - `fleet_queue_dependency_failed_last_hour{kind}`: jobs ended `cancelled` with `DEPENDENCY_FAILED`
///   in the last hour
/// - `fleet_queue_dependency_releases`, `fleet_queue_dependency_failures`: dependents released, and
///   ended `DEPENDENCY_FAILED`, fleet-wide since the schema was created (counters the database
///   keeps, in the transactions that do it; read them with `rate()`)
/// - `fleet_queue_paused{kind}`: 1 while the kind is paused (`queue.pause`), else 0
/// - `fleet_limit_max_running{key}`, `fleet_limit_rate{key}` (in force; -1: none), `fleet_limit_running{key}`,
///   `fleet_limit_waiting{key}` (due jobs of exact keys), `fleet_limit_keys{key}` (keys in use under it)
/// - `fleet_db_oldest_snapshot_seconds`, `fleet_db_oldest_snapshot_xids`, `fleet_db_replica_feedback_xids`:
///   the oldest snapshot in the fleet's database, when given `horizon` (`SnapshotHorizonGauges`)
/// - `fleet_queue_stats_timestamp_seconds`: Unix time of the last refresh whose queries answered
///   (falls behind while the database does not answer)
///
/// The dispatcher refreshes them every `interval` instead of querying at scrape time: the
/// statement scans the jobs table's live rows, so its cost stays one per interval however
/// many Prometheus servers scrape how often, and a slow database never makes a scrape time out.
public struct QueueGauges: Service {
    let queue: JobQueue
    /// Reported even with no job, so a drained or new kind shows 0 rather than no series.
    let kinds: Set<JobKind>
    let interval: Duration
    /// Where the oldest snapshot is read (the primary); nil: not reported.
    let horizon: (any PostgresExecutor)?
    let logger: Logger

    public init(queue: JobQueue, kinds: KnownKinds, interval: Duration = .seconds(15), horizon: (any PostgresExecutor)? = nil, logger: Logger) {
        self.queue = queue
        self.horizon = horizon
        self.kinds = kinds.kinds
        self.interval = interval
        self.logger = logger
    }

    public func run() async throws {
        await refresh()
        await cancelWhenGracefulShutdown {
            await repeatEvery(interval) { await refresh() }
        }
    }

    /// Reads the counts once and sets every gauge; kinds with no row read 0, so a drained queue
    /// shows 0 rather than its last depth.
    func refresh() async {
        let stats: [KindStats]
        let pausedKinds: Set<String>
        do {
            stats = try await queue.stats(window: .seconds(3600))
            pausedKinds = Set(try await JobControl(driver: queue.driver).pauses().filter { $0.target.scope == .kind }.map(\.target.name))
        } catch {
            logger.warning("queue gauges not refreshed", metadata: ["error": "\(error)"])
            return
        }
        let byKind = Dictionary(stats.map { ($0.kind, $0) }, uniquingKeysWith: { first, _ in first })
        for kind in kinds.union(byKind.keys) {
            let line = byKind[kind]
            let dimensions = [("kind", kind.rawValue)]
            for (state, count) in [("due", line?.due), ("scheduled", line?.scheduled), ("running", line?.running), ("waiting", line?.waiting)] {
                Gauge(label: "fleet_queue_jobs", dimensions: dimensions + [("state", state)]).record(count ?? 0)
            }
            Gauge(label: "fleet_queue_retrying_jobs", dimensions: dimensions).record(line?.retrying ?? 0)
            Gauge(label: "fleet_queue_oldest_due_seconds", dimensions: dimensions).record(line?.oldestDueAge?.seconds ?? 0)
            Gauge(label: "fleet_queue_dead_last_hour", dimensions: dimensions).record(line?.dead ?? 0)
            Gauge(label: "fleet_queue_dependency_failed_last_hour", dimensions: dimensions).record(line?.dependencyFailed ?? 0)
            Gauge(label: "fleet_queue_paused", dimensions: dimensions).record(pausedKinds.contains(kind.rawValue) ? 1 : 0)
        }
        await refreshLimits()
        await refreshDependencyTotals()
        if let horizon { await SnapshotHorizonGauges.refresh(on: horizon, logger: logger) }
        Gauge(label: "fleet_queue_stats_timestamp_seconds").record(Date().timeIntervalSince1970)
    }

    private func refreshDependencyTotals() async {
        do {
            let totals = try await queue.driver.jobDependencyTotals()
            Gauge(label: "fleet_queue_dependency_releases").record(totals.released)
            Gauge(label: "fleet_queue_dependency_failures").record(totals.failed)
        } catch {
            logger.warning("dependency gauges not refreshed", metadata: ["error": "\(error)"])
        }
    }

    /// Per rule of one key (`provider:…`): its limit, running, waiting and rate in force. Keys
    /// under a prefix rule (one per user) are counted, not listed: their number is unbounded.
    private func refreshLimits() async {
        do {
            let rules = try await queue.driver.limitList()
            guard !rules.isEmpty else { return }
            let usage = try await queue.driver.limitUsage()
            for rule in rules {
                let dimensions = [("key", rule.key)]
                let keys = usage.filter { $0.rule == rule.key }
                Gauge(label: "fleet_limit_max_running", dimensions: dimensions).record(rule.maxRunning ?? -1)
                Gauge(label: "fleet_limit_rate", dimensions: dimensions).record(rule.effectiveRate ?? -1)
                Gauge(label: "fleet_limit_running", dimensions: dimensions).record(keys.reduce(0) { $0 + $1.running })
                Gauge(label: "fleet_limit_waiting", dimensions: dimensions).record(keys.reduce(0) { $0 + $1.waiting })
                Gauge(label: "fleet_limit_keys", dimensions: dimensions).record(keys.count)
            }
        } catch {
            logger.warning("limit gauges not refreshed", metadata: ["error": "\(error)"])
        }
    }
}
