import FleetPostgres
import Logging
import Metrics

/// The oldest snapshot in the fleet's database as gauges, for `/metrics` and the alert
/// `FleetSnapshotHeld` (docs/operations.md, "A snapshot held open"):
/// - `fleet_db_oldest_snapshot_seconds`: age of the oldest transaction holding a snapshot in the
///   fleet's database (0: none)
/// - `fleet_db_oldest_snapshot_xids`: transactions since its `backend_xmin` (0: none)
/// - `fleet_db_replica_feedback_xids`: transactions since the oldest `xmin` a replica holds on the
///   primary by a slot or `hot_standby_feedback` (0: none)
///
/// Set by `QueueGauges` on the leading dispatcher with the queue's gauges, every 15 s: one
/// statement over the server's activity views, never at scrape time.
enum SnapshotHorizonGauges {
    static func refresh(on executor: any PostgresExecutor, logger: Logger) async {
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
