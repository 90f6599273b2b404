/// How far a streaming replica's replay is behind its primary, as the replica itself knows it.
public struct ReplicaLag: Sendable, Equatable {
    /// False: the server is not in recovery (a primary, or a standby since promoted).
    public let isReplica: Bool
    /// Seconds since the commit, on the primary, of the newest transaction replayed here; 0 when
    /// everything received is replayed (an idle primary sends nothing, so its replica's last
    /// replayed commit grows old without it being behind). nil when not a replica, or before
    /// the first replayed commit.
    public let seconds: Double?

    public init(isReplica: Bool, seconds: Double?) {
        self.isReplica = isReplica
        self.seconds = seconds
    }

    /// Asks the server behind `pool`.
    public static func measure(on pool: PostgresPool) async throws -> ReplicaLag {
        let row = try await pool.query("""
            SELECT pg_is_in_recovery() AS replica,
                   CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0
                        ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp()) END AS lag
            """).rows[0]
        return ReplicaLag(isReplica: try row.bool("replica"), seconds: row["lag"].flatMap(Double.init))
    }
}
