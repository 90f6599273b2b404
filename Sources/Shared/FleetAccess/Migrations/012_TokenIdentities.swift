import FleetPostgres

extension AccessMigrations {
    /// A token is known by its digest, not its name. Console sessions named their token, and the
    /// name `default` answered as the environment's `operate` token even for a `read` token of
    /// the table called so; sessions now hold the token's digest (`token_hash`; `token_name`
    /// stays, nullable, for dispatchers of the previous release during a rolling upgrade). Old
    /// sessions cannot be mapped to a digest safely, so they end: every operator logs in once more.
    /// The names the system gives callers (`default`, `unix-socket`) are reserved: a token that
    /// has one is renamed, keeps its secret, role and dates, and `renamed_from` says what it was
    /// called, for `dispatcher access-token list` and the dispatcher's warning at start.
    /// The console's login form carries a value signed with `console_keys.login_key`, one key for
    /// every dispatcher of the fleet, drawn by PostgreSQL's strong random source.
    static let tokenIdentities = Migration(version: 12, name: "token identities", sql: """
        DELETE FROM console_sessions;
        ALTER TABLE console_sessions ALTER COLUMN token_name DROP NOT NULL, ADD COLUMN token_hash bytea;

        ALTER TABLE access_tokens ADD COLUMN renamed_from text;
        UPDATE access_tokens SET renamed_from = name, name = name || '.renamed-' || left(encode(token_hash, 'hex'), 8)
        WHERE name IN ('default', 'unix-socket');
        ALTER TABLE access_tokens ADD CONSTRAINT access_tokens_name_not_reserved CHECK (name NOT IN ('default', 'unix-socket'));

        CREATE TABLE console_keys (
            only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
            login_key bytea NOT NULL
        );
        INSERT INTO console_keys (login_key)
        VALUES (decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'));
        """)
}
