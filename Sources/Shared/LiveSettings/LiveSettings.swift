import FleetPostgres

/// The settings operators change without a deploy (`fleet_settings`: a key, a JSON value): the
/// render provider and categories, the image profiles. The only code that reads or writes that
/// table. Nothing is cached: every read is one indexed row per key, so a change applies to the
/// next job or request in every process.
public struct LiveSettings: Sendable {
    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// The JSON text of each of `keys` that is set.
    public func values(of keys: [String]) async throws -> [String: String] {
        let rows = try await pool.query("SELECT key, value::text AS value FROM fleet_settings WHERE key = ANY($1::text[])",
                                        [PostgresArray(keys)]).rows
        return Dictionary(uniqueKeysWithValues: try rows.map { (try $0.string("key"), try $0.string("value")) })
    }

    /// Sets every key of `values` (JSON texts) in one statement: a reader sees all of them or none.
    public func set(_ values: [String: String]) async throws {
        let keys = values.keys.sorted()
        try await pool.query("""
            INSERT INTO fleet_settings (key, value)
            SELECT key, value::jsonb FROM unnest($1::text[], $2::text[]) AS entry (key, value)
            ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()
            """, [PostgresArray(keys), PostgresArray(keys.map { values[$0]! })])
    }

    /// Merges the members of `object` (a JSON object's text) into the object at `key`, created when
    /// absent. One statement, so two operators merging different members at once both keep theirs.
    public func merge(_ object: String, into key: String) async throws {
        try await pool.query("""
            INSERT INTO fleet_settings (key, value) VALUES ($1, $2::jsonb)
            ON CONFLICT (key) DO UPDATE SET value = fleet_settings.value || EXCLUDED.value, updated_at = now()
            """, [key, object])
    }

    /// Removes `member` from the object at `key`.
    public func remove(member: String, from key: String) async throws {
        try await pool.query("UPDATE fleet_settings SET value = value - $2::text, updated_at = now() WHERE key = $1", [key, member])
    }
}
