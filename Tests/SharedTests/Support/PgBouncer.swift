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
/// database, so the question adds none): those of LISTEN sessions (`wearbloom-listener`) and the
/// rest (through PgBouncer: its server connections).
struct ServerConnections: Sendable, Equatable {
    var listeners = 0
    var others = 0

    static func of(database: String, on cluster: PostgresCluster, admin: PostgresConnection) async throws -> ServerConnections {
        let row = try await admin.query("""
            SELECT count(*) FILTER (WHERE application_name = 'wearbloom-listener') AS listeners,
                   count(*) FILTER (WHERE application_name IS DISTINCT FROM 'wearbloom-listener') AS others
            FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'
            """, [database]).rows[0]
        return ServerConnections(listeners: try row.int("listeners"), others: try row.int("others"))
    }
}
