import FleetPostgres
import Foundation

/// The render settings that change without a deploy, kept in `fleet_settings`: the active
/// provider and the enabled garment categories. Read on every request (one indexed row each),
/// so an update applies to the next render everywhere.
public struct RenderSettings: Sendable, Equatable {
    public var provider: String
    public var enabledCategories: Set<GarmentCategory>

    public init(provider: String, enabledCategories: Set<GarmentCategory>) {
        self.provider = provider
        self.enabledCategories = enabledCategories
    }

    public static func load(from pool: PostgresPool) async throws -> RenderSettings {
        RenderSettings(row: try await pool.query("SELECT \(columns)").rows.first)
    }

    /// The two settings as columns `provider` and `categories`, for a statement that reads more.
    static let columns = """
        (SELECT value #>> '{}' FROM fleet_settings WHERE key = 'render.provider') AS provider,
        (SELECT value::text FROM fleet_settings WHERE key = 'render.categories') AS categories
        """

    init(row: PostgresRow?) {
        let names = (try? JSONDecoder().decode([String].self, from: Data((row?["categories"] ?? "[]").utf8))) ?? []
        self.init(provider: row?["provider"] ?? TryOnProviders.defaultName, enabledCategories: Set(names.compactMap(GarmentCategory.init(rawValue:))))
    }

    /// Writes both settings (operators: `dispatcher settings`, or SQL on `fleet_settings`).
    public func save(to pool: PostgresPool) async throws {
        let categories = String(decoding: try JSONEncoder().encode(enabledCategories.map(\.rawValue).sorted()), as: UTF8.self)
        let provider = String(decoding: try JSONEncoder().encode(provider), as: UTF8.self)
        try await pool.query("""
            INSERT INTO fleet_settings (key, value) VALUES ('render.provider', $1::jsonb), ('render.categories', $2::jsonb)
            ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()
            """, [provider, categories])
    }
}
