import FleetPostgres

/// The live settings' migrations (`docs/schema.md`).
public enum LiveSettingsMigrations {
    public static let all = [liveSettings]

    /// This module's part of version 2: the settings table, with the render defaults version 2
    /// shipped (the render provider and the enabled categories).
    static let liveSettings = Migration(version: 2, name: "renders and credits", sql: """
        CREATE TABLE fleet_settings (
            key text PRIMARY KEY,
            value jsonb NOT NULL,
            updated_at timestamptz NOT NULL DEFAULT now()
        );
        INSERT INTO fleet_settings (key, value) VALUES
            ('render.provider', '"local"'),
            ('render.categories', '["tops", "bottoms", "dresses", "shoes", "outerwear"]');
        """)
}
