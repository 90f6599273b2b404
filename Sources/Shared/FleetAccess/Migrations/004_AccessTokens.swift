import FleetPostgres

extension AccessMigrations {
    /// Named access tokens with roles (`docs/protocol.md`). Released as part of version 4, "job
    /// control", with the queue's pauses and audit trail (FleetQueue's part).
    static let accessTokens = Migration(version: 4, name: "job control", sql: """
        CREATE TABLE access_tokens (
            name text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9._-]{1,64}$'),
            role text NOT NULL CHECK (role IN ('submit', 'operate', 'read')),
            -- BLAKE2b-256 of the token: the token itself is shown once, when created, and never stored.
            token_hash bytea NOT NULL UNIQUE,
            created_at timestamptz NOT NULL DEFAULT now(),
            revoked_at timestamptz
        );
        """)
}
