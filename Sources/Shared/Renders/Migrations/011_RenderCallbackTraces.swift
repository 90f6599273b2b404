import FleetPostgres

extension RenderMigrations {
    /// A render's callback continues the render's trace: the render keeps none of its own, but its
    /// `render.run` job does (migration 10), and every render has one from its request on.
    static let renderCallbackTraces = Migration(version: 11, name: "render callback traces", sql: """
        \(renderCallbackFunction(replacing: true, carryingTrace: true))
        """)
}
