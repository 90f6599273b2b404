import Logging

/// Applies the pending migrations (the fleet's are `FleetSchema.migrations`, handed down by each executable). Any number of
/// processes may call it at once. Each version, with all its parts, is one transaction, which
/// first takes a transaction-scoped advisory lock: one process applies while the others wait,
/// then find it applied. The lock needs no session, so the migrator runs through a pooler in
/// transaction mode as well as on a direct connection (and a session-level lock of the same key,
/// taken by an older migrator, still excludes it).
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
    public func migrate(conninfo: String, statements: StatementMode = .prepared) async throws -> [Int] {
        let connection = try await PostgresConnection.connect(conninfo, applicationName: "wearbloom-migrate", statements: statements)
        var applied: [Int] = []
        while let version = try await applyNext(on: connection) {
            let parts = migrations.filter { $0.version == version }
            logger.info("applied migration", metadata: ["version": "\(version)", "name": "\(parts[0].name)", "parts": "\(parts.count)"])
            applied.append(version)
        }
        return applied
    }

    /// Applies the lowest pending version under the lock; nil when none is pending.
    private func applyNext(on connection: PostgresConnection) async throws -> Int? {
        // By version; a version's parts in the list's order.
        let versions = Dictionary(grouping: migrations, by: \.version)
        return try await connection.transaction { connection in
            try await connection.query("SELECT pg_advisory_xact_lock($1)", [Migrator.lockKey])
            try await connection.query("""
                CREATE TABLE IF NOT EXISTS schema_migrations (
                    version integer PRIMARY KEY,
                    name text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )
                """)
            let done = Set(try await connection.query("SELECT version FROM schema_migrations").rows.map { try $0.int("version") })
            guard let version = versions.keys.sorted().first(where: { !done.contains($0) }) else { return nil }
            let parts = versions[version]!
            for part in parts { try await connection.query(part.sql) }
            try await connection.query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", [version, parts[0].name])
            return version
        }
    }
}
