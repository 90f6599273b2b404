import FleetPostgres
import FleetSchema
import FleetSupport
import Foundation

/// The database the suites measure on: `DATABASE_URL`'s server, or the embedded one.
/// Each run uses a fresh database `fleet_bench` on that server.
struct BenchDatabase {
    let url: String
    let pool: PostgresPool

    static func prepare() async throws -> BenchDatabase {
        var serverURL = ProcessInfo.processInfo.environment["DATABASE_URL"] ?? ""
        if serverURL.isEmpty {
            progress("DATABASE_URL unset: starting the embedded PostgreSQL (scripts/pg.sh start)")
            let output = NSTemporaryDirectory() + "pg-url-\(getpid())"
            let status = try await ChildProcess.run(packageRoot.appendingPathComponent("scripts/pg.sh").path, ["start"], outputPath: output)
            guard status == 0 else { throw BenchError("scripts/pg.sh start failed: \((try? String(contentsOfFile: output, encoding: .utf8)) ?? "")") }
            serverURL = try String(contentsOfFile: output, encoding: .utf8).split(separator: "\n").last.map(String.init) ?? ""
        }
        let admin = try await PostgresConnection.connect(serverURL, applicationName: "fleet-bench")
        try await admin.query("DROP DATABASE IF EXISTS fleet_bench WITH (FORCE)")
        try await admin.query("CREATE DATABASE fleet_bench")
        let url = try databaseURL(serverURL, name: "fleet_bench", on: admin)
        try await Migrator(migrations: FleetSchema.migrations, logger: .init(label: "fleet-bench")).migrate(conninfo: url)
        let pool = PostgresPool(conninfo: url, maxConnections: 4, applicationName: "fleet-bench")
        if let paths = ProcessInfo.processInfo.environment["FLEET_BENCH_SETUP_SQL"], !paths.isEmpty {
            // What a feature costs the hot path is measured by taking it away: each file (paths
            // separated by ':') drops its indexes or triggers on the fresh database (scripts/ablations/).
            for path in paths.split(separator: ":").map(String.init) {
                try await pool.query(try String(contentsOfFile: path, encoding: .utf8))
                progress("FLEET_BENCH_SETUP_SQL: applied \(path) after the migrations")
            }
        }
        return BenchDatabase(url: url, pool: pool)
    }

    /// The server's settings that matter to the figures, reported with them.
    func settings() async throws -> String {
        let rows = try await pool.query("""
            SELECT name, setting FROM pg_settings
            WHERE name IN ('server_version', 'fsync', 'synchronous_commit', 'shared_buffers')
            ORDER BY name
            """).rows
        return try rows.map { "\(try $0.string("name"))=\(try $0.string("setting"))" }.joined(separator: " ")
    }

    /// A libpq URL for database `name` on the same server as `admin`.
    private static func databaseURL(_ serverURL: String, name: String, on admin: PostgresConnection) throws -> String {
        // key=value conninfo: a later dbname wins; URIs: replace the path.
        if !serverURL.contains("://") { return serverURL + " dbname=\(name)" }
        guard var components = URLComponents(string: serverURL) else { return serverURL }
        components.path = "/\(name)"
        return components.string ?? serverURL
    }
}
