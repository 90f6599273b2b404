import FleetPostgres
import Foundation

/// What the PostgreSQL server has done so far, read in one statement: the database's committed
/// and rolled-back transactions (`pg_stat_database`), the WAL written (`pg_stat_wal`), and the
/// server's CPU time when it runs on this machine (the postmaster and every backend, those that
/// ended included, as `scripts/pg-cost.sh` counts it). Two readings give the cost of what ran
/// between them.
struct ServerCounters {
    var commits: Double
    var rollbacks: Double
    var walBytes: Double
    var walRecords: Double
    /// nil when the server's process cannot be read here (another host, another user).
    var cpuSeconds: Double?
    var at: ContinuousClock.Instant

    /// One statement, so one transaction of the reader's own (`ServerCostMeter` subtracts it).
    static let readSQL = """
        SELECT d.xact_commit AS commits, d.xact_rollback AS rollbacks, w.wal_bytes AS wal_bytes, w.wal_records AS wal_records,
               current_setting('data_directory') AS data_directory
        FROM pg_stat_database AS d, pg_stat_wal AS w WHERE d.datname = current_database()
        """

    static func - (after: Self, before: Self) -> Self {
        Self(commits: after.commits - before.commits, rollbacks: after.rollbacks - before.rollbacks,
             walBytes: after.walBytes - before.walBytes, walRecords: after.walRecords - before.walRecords,
             cpuSeconds: after.cpuSeconds.flatMap { a in before.cpuSeconds.map { a - $0 } },
             at: after.at)
    }
}

/// Reads `ServerCounters` and the statements by total time on a connection of its own, counting
/// its own transactions so that they are taken out of what it reports.
struct ServerCostMeter {
    let connection: PostgresConnection
    /// Whether `pg_stat_statements` is loaded (`shared_preload_libraries`) and created here.
    let statements: Bool

    static func connect(_ conninfo: String) async throws -> ServerCostMeter {
        let connection = try await PostgresConnection.connect(conninfo, applicationName: "fleet-bench-cost")
        let loaded = try await connection.query("SELECT current_setting('shared_preload_libraries') LIKE '%pg_stat_statements%' AS loaded")
            .rows[0].bool("loaded")
        if loaded { try await connection.query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements") }
        return ServerCostMeter(connection: connection, statements: loaded)
    }

    /// The counters now. PostgreSQL's backends report their counts when idle, at most once a
    /// second, so a reading taken at once after work may miss the last second's: callers wait
    /// for quiet first (`RenderSuite`'s cost mode drains and waits).
    func read() async throws -> ServerCounters {
        let row = try await connection.query(ServerCounters.readSQL).rows[0]
        return ServerCounters(
            commits: try row.double("commits"), rollbacks: try row.double("rollbacks"), walBytes: try row.double("wal_bytes"),
            walRecords: try row.double("wal_records"), cpuSeconds: Self.serverCPUSeconds(dataDirectory: try row.string("data_directory")),
            at: .now)
    }

    /// Forgets the statements counted so far (one transaction of the meter's own).
    func resetStatements() async throws {
        if statements { try await connection.query("SELECT pg_stat_statements_reset()") }
    }

    struct Statement {
        let milliseconds: Double
        let calls: Double
        let query: String
    }

    /// The statements of this database by total execution time, the meter's own left out.
    func topStatements(limit: Int) async throws -> [Statement] {
        guard statements else { return [] }
        return try await connection.query("""
            SELECT total_exec_time AS ms, calls, left(regexp_replace(query, '\\s+', ' ', 'g'), 110) AS query
            FROM pg_stat_statements
            WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
              AND query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE '%pg_stat_database%'
            ORDER BY total_exec_time DESC LIMIT $1
            """, [limit]).rows.map {
            Statement(milliseconds: try $0.double("ms"), calls: try $0.double("calls"), query: try $0.string("query"))
        }
    }

    /// CPU seconds of the postmaster (with the backends it has reaped) and of its living
    /// children, from /proc; nil when the data directory's `postmaster.pid` cannot be read here.
    static func serverCPUSeconds(dataDirectory: String) -> Double? {
        guard let pidFile = try? String(contentsOfFile: dataDirectory + "/postmaster.pid", encoding: .utf8),
              let postmaster = pidFile.split(separator: "\n").first.flatMap({ Int32($0) }),
              let own = CPUTime.ticks(of: postmaster, withReapedChildren: true)
        else { return nil }
        let children = (try? String(contentsOfFile: "/proc/\(postmaster)/task/\(postmaster)/children", encoding: .utf8)) ?? ""
        let total = children.split(separator: " ").compactMap { Int32($0) }.reduce(own) { $0 + (CPUTime.ticks(of: $1, withReapedChildren: true) ?? 0) }
        return CPUTime.seconds(total)
    }
}
