import FleetPostgres

extension RenderMigrations {
    /// Which garment image the render sent its provider: its cut-out (true) or its normalised
    /// photo (false, when background removal ended without a cut-out); NULL until the render has
    /// read its inputs. The render's completion callback says it too (`garmentCutout`).
    static let renderGarmentInput = Migration(version: 19, name: "render garment input", sql: """
        ALTER TABLE renders ADD COLUMN garment_cutout boolean;
        \(renderCallbackFunction(replacing: true, carryingTrace: true, withGarmentInput: true))
        """)
}
