import FleetPostgres
import Foundation
import LiveSettings
import Providers

/// The render settings that change without a deploy (`LiveSettings`): the active provider and
/// the enabled garment categories. Read on every request, so an update applies to the next
/// render everywhere.
public struct RenderSettings: Sendable, Equatable {
    public var provider: String
    public var enabledCategories: Set<GarmentCategory>

    public init(provider: String, enabledCategories: Set<GarmentCategory>) {
        self.provider = provider
        self.enabledCategories = enabledCategories
    }

    static let providerKey = "render.provider"
    static let categoriesKey = "render.categories"

    public static func load(from pool: PostgresPool) async throws -> RenderSettings {
        let values = try await LiveSettings(pool: pool).values(of: [providerKey, categoriesKey])
        let provider = values[providerKey].flatMap { try? JSONDecoder().decode(String.self, from: Data($0.utf8)) }
        let names = values[categoriesKey].flatMap { try? JSONDecoder().decode([String].self, from: Data($0.utf8)) } ?? []
        return RenderSettings(provider: provider ?? TryOnProviders.defaultName, enabledCategories: Set(names.compactMap(GarmentCategory.init(rawValue:))))
    }

    /// Writes both settings (operators: `dispatcher settings`).
    public func save(to pool: PostgresPool) async throws {
        let categories = String(decoding: try JSONEncoder().encode(enabledCategories.map(\.rawValue).sorted()), as: UTF8.self)
        let provider = String(decoding: try JSONEncoder().encode(provider), as: UTF8.self)
        try await LiveSettings(pool: pool).set([Self.providerKey: provider, Self.categoriesKey: categories])
    }
}
