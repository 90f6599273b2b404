import Logging

/// Applies the pending migrations (the fleet's are `FleetSchema.migrations`). Any number of
/// processes may call it at once: a session advisory lock lets one apply while the others wait,
/// then find nothing left to do. Each version, with all its parts, is one transaction.
public struct Migrator: Sendable {
    /// `hashtext('wearbloom.migrations')`, fixed so every version of the fleet agrees on it.
    static let lockKey: Int64 = 1_749_230_517
    let migrations: [Migration]
    let logger: Logger

    public init(migrations: [Migration], logger: Logger) {
        self.migrations = migrations
        self.logger = logger
    }

    /// Returns the versions it applied.
    @discardableResult
    public func migrate(conninfo: String) async throws -> [Int] {
        let connection = try await PostgresConnection.connect(conninfo, applicationName: "wearbloom-migrate")
        try await connection.query("SELECT pg_advisory_lock($1)", [Migrator.lockKey])
        do {
            let applied = try await applyPending(on: connection)
            try await connection.query("SELECT pg_advisory_unlock($1)", [Migrator.lockKey])
            return applied
        } catch {
            _ = try? await connection.query("SELECT pg_advisory_unlock($1)", [Migrator.lockKey])
            throw error
        }
    }

    private func applyPending(on connection: PostgresConnection) async throws -> [Int] {
        try await connection.query("""
            CREATE TABLE IF NOT EXISTS schema_migrations (
                version integer PRIMARY KEY,
                name text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )
            """)
        let done = Set(try await connection.query("SELECT version FROM schema_migrations").rows.map { try $0.int("version") })
        var applied: [Int] = []
        // By version; a version's parts in the list's order.
        let versions = Dictionary(grouping: migrations, by: \.version)
        for version in versions.keys.sorted() where !done.contains(version) {
            let parts = versions[version]!
            try await connection.transaction { connection in
                for part in parts { try await connection.query(part.sql) }
                try await connection.query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", [version, parts[0].name])
            }
            logger.info("applied migration", metadata: ["version": "\(version)", "name": "\(parts[0].name)", "parts": "\(parts.count)"])
            applied.append(version)
        }
        return applied
    }
}
