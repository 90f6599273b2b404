import FleetPostgres

extension AccessMigrations {
    /// The operator console's sessions (`docs/console.md`): a row per login, keyed by the digest of
    /// the cookie's secret, so every dispatcher behind a load balancer knows every session and a
    /// logout ends it everywhere.
    static let consoleSessions = Migration(version: 8, name: "console sessions", sql: """
        CREATE TABLE console_sessions (
            secret_hash bytea PRIMARY KEY,
            token_name text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            expires_at timestamptz NOT NULL
        );
        CREATE INDEX console_sessions_expires_idx ON console_sessions (expires_at);
        """)
}
