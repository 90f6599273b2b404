import FleetPostgres
import FleetSupport
import Foundation

/// A PgBouncer started by the project's own `scripts/pgbouncer.sh`, in transaction mode in front
/// of a cluster. It forwards every database name, each (database, user) with a pool of its own of
/// `poolSize` server connections.
struct PgBouncer: Sendable {
    let port: Int
    let cluster: PostgresCluster
    static let poolSize = 8

    /// The shared one: on `FLEET_TEST_PGBOUNCER_PORT` (default: the shared cluster's port + 1), in
    /// front of the shared cluster, started on first use unless `scripts/test.sh` already did.
    static let shared = PgBouncer(
        port: ProcessInfo.processInfo.environment["FLEET_TEST_PGBOUNCER_PORT"].flatMap { Int($0) } ?? PostgresCluster.shared.port + 1,
        cluster: .shared)

    private static let sharedStart = Task {
        await PostgresCluster.startSharedOnce()
        if ProcessInfo.processInfo.environment["FLEET_TEST_PGBOUNCER_STARTED"] == nil { try await shared.start() }
    }

    static func startSharedOnce() async throws { try await sharedStart.value }

    /// `directURL` (a database of `cluster`) reached through this PgBouncer instead.
    func url(through directURL: String) -> String {
        directURL.replacingOccurrences(of: "127.0.0.1:\(cluster.port)/", with: "127.0.0.1:\(port)/")
    }

    /// The server connections PgBouncer holds for `database` (`SHOW POOLS` on its admin console:
    /// active, idle, used, being tested or logging in).
    func serverConnections(of database: String, admin: PostgresConnection) async throws -> Int {
        let rows = try await admin.query("SHOW POOLS").rows
        return try rows.filter { $0["database"] == database }.reduce(0) { total, row in
            try total + ["sv_active", "sv_idle", "sv_used", "sv_tested", "sv_login"].reduce(0) { try $0 + row.int($1) }
        }
    }

    var adminURL: String { "postgresql://postgres@127.0.0.1:\(port)/pgbouncer" }

    func start() async throws {
        try await script("start", "--pg-port", "\(cluster.port)", "--pool-size", "\(Self.poolSize)", "--mode", "transaction")
    }

    func stop() async throws { try await script("stop") }

    private func script(_ command: String, _ options: String...) async throws {
        let log = temporaryPath("pgbouncer-script") + ".log"
        defer { try? FileManager.default.removeItem(atPath: log) }
        let status = try await ChildProcess.run(packageRoot.appendingPathComponent("scripts/pgbouncer.sh").path,
                                                [command, "--port", "\(port)"] + options, outputPath: log)
        guard status == 0 else {
            let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            throw TestFailure("scripts/pgbouncer.sh \(command) exited \(status): \(output.suffix(1500))")
        }
    }
}

/// The server connections of one database, from `pg_stat_activity` (asked on the `postgres`
/// database, so the question adds none): those over the cluster's Unix socket (where the tests'
/// LISTEN sessions connect, `PostgresCluster.socketURL`) and those over TCP (PgBouncer's).
struct ServerConnections: Sendable, Equatable {
    var listeners = 0
    var others = 0

    static func of(database: String, admin: PostgresConnection) async throws -> ServerConnections {
        let row = try await admin.query("""
            SELECT count(*) FILTER (WHERE client_addr IS NULL) AS listeners, count(*) FILTER (WHERE client_addr IS NOT NULL) AS others
            FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'
            """, [database]).rows[0]
        return ServerConnections(listeners: try row.int("listeners"), others: try row.int("others"))
    }
}

extension PostgresCluster {
    /// `directURL` (a database of this cluster) over its Unix socket instead of TCP.
    func socketURL(_ directURL: String) async throws -> String {
        let output = temporaryPath("pg-dir")
        defer { try? FileManager.default.removeItem(atPath: output) }
        let status = try await ChildProcess.run(packageRoot.appendingPathComponent("scripts/pg.sh").path,
                                                ["dir", "--dir", directory], outputPath: output)
        guard status == 0 else { throw TestFailure("scripts/pg.sh dir exited \(status)") }
        let socketDirectory = try String(contentsOfFile: output, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        let database = directURL.split(separator: "/").last!
        return "postgresql://postgres@/\(database)?host=\(socketDirectory)&port=\(port)"
    }
}
