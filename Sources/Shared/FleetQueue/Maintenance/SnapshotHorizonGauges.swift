import FleetPostgres
import FleetSupport
import Foundation
import Logging
import Metrics
import ServiceLifecycle

/// The oldest snapshot in the fleet's database as gauges, for `/metrics` and the alert
/// `FleetSnapshotHeld` (docs/operations.md, "A snapshot held open"):
/// - `fleet_db_oldest_snapshot_seconds`: age of the oldest transaction holding a snapshot in the
///   fleet's database (0: none)
/// - `fleet_db_oldest_snapshot_xids`: transactions since its `backend_xmin` (0: none)
/// - `fleet_db_replica_feedback_xids`: transactions since the oldest `xmin` a replica holds on the
///   primary by a slot or `hot_standby_feedback` (0: none)
///
/// Refreshed by the leading dispatcher with the queue's gauges, every `interval`: one statement
/// over the server's activity views, never at scrape time.
public struct SnapshotHorizonGauges: Service {
    let executor: any PostgresExecutor
    let interval: Duration
    let logger: Logger

    public init(executor: any PostgresExecutor, interval: Duration = .seconds(15), logger: Logger) {
        self.executor = executor
        self.interval = interval
        self.logger = logger
    }

    public func run() async throws {
        await refresh()
        await cancelWhenGracefulShutdown {
            await repeatEvery(interval) { await refresh() }
        }
    }

    func refresh() async {
        do {
            let horizon = try await SnapshotHorizon.measure(on: executor)
            Gauge(label: "fleet_db_oldest_snapshot_seconds").record(horizon.oldestSeconds ?? 0)
            Gauge(label: "fleet_db_oldest_snapshot_xids").record(horizon.oldestXids ?? 0)
            Gauge(label: "fleet_db_replica_feedback_xids").record(horizon.replicaFeedbackXids ?? 0)
        } catch {
            logger.warning("snapshot horizon gauges not refreshed", metadata: ["error": "\(error)"])
        }
    }
}
