/// The oldest snapshot that holds back the fleet database's horizon: while it lives, no row
/// version deleted or updated after it began can be vacuumed, and no index entry of one can be
/// skipped without a visit to the table. A job queue feels it within a minute (every claimed job
/// leaves such an entry, docs/reliability.md "Held snapshot"), long before the usual wraparound
/// thresholds (hours, tens of millions of transactions) fire.
public struct SnapshotHorizon: Sendable, Equatable {
    /// Seconds since the oldest transaction holding a snapshot (or an xid) in this database began;
    /// nil: none but the one asking.
    public let oldestSeconds: Double?
    /// Transactions since that session's `backend_xmin`.
    public let oldestXids: Int?
    /// Who holds it: `application_name` (or the backend type) and state, never the query.
    public let holder: String?
    /// Transactions since the oldest `xmin` a replica holds on this server, by a replication
    /// slot or a walsender's `hot_standby_feedback`: it holds back every database; nil: none.
    public let replicaFeedbackXids: Int?

    public init(oldestSeconds: Double?, oldestXids: Int?, holder: String?, replicaFeedbackXids: Int?) {
        self.oldestSeconds = oldestSeconds
        self.oldestXids = oldestXids
        self.holder = holder
        self.replicaFeedbackXids = replicaFeedbackXids
    }

    /// One statement over `pg_stat_activity`, `pg_replication_slots` and `pg_stat_replication`.
    /// Other roles' sessions show their `backend_xmin` and `xact_start` only to a role with
    /// `pg_read_all_stats` (in `pg_monitor`): without it, sessions of other roles are not seen.
    /// Autovacuum workers are left out: a vacuum's own snapshot is ignored by every other vacuum's
    /// horizon, so it holds nothing back, and it ends by itself.
    public static let measureSQL = """
        WITH holders AS (
            SELECT coalesce(nullif(application_name, ''), backend_type) || ' (' || coalesce(state, backend_type) || ')' AS holder,
                   extract(epoch FROM clock_timestamp() - coalesce(xact_start, backend_start))::float8 AS seconds,
                   age(backend_xmin) AS xids
            FROM pg_stat_activity
            WHERE datname = current_database() AND backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
              AND backend_type <> 'autovacuum worker'
        ),
        oldest AS (SELECT holder, seconds, xids FROM holders ORDER BY xids DESC, seconds DESC LIMIT 1)
        SELECT (SELECT seconds FROM oldest) AS oldest_seconds, (SELECT xids FROM oldest) AS oldest_xids,
               (SELECT holder FROM oldest) AS holder,
               (SELECT max(xids) FROM (
                    SELECT age(xmin) AS xids FROM pg_replication_slots WHERE xmin IS NOT NULL
                    UNION ALL SELECT age(backend_xmin) FROM pg_stat_replication WHERE backend_xmin IS NOT NULL
               ) AS replicas) AS feedback_xids
        """

    public static func measure(on executor: any PostgresExecutor) async throws -> SnapshotHorizon {
        let row = try await executor.query(measureSQL).rows[0]
        return SnapshotHorizon(
            oldestSeconds: row["oldest_seconds"].flatMap(Double.init), oldestXids: row["oldest_xids"].flatMap { Int($0) },
            holder: row["holder"], replicaFeedbackXids: row["feedback_xids"].flatMap { Int($0) })
    }
}
