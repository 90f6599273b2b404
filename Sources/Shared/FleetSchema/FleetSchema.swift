import AccessSchema
import CallbackSchema
import FleetPostgres
import FleetQueue
import LiveSettings
import RenderSchema

/// The fleet's schema: every owner's migrations (each beside the module whose tables it
/// creates: `Sources/Shared/<Module>/Migrations/`, one file each). A version released with parts
/// of several owners has a migration in each, applied in one transaction in this order: the
/// queue first (the tables the others' triggers name), then the live settings, the callbacks (`fleet_wire_time`,
/// which the renders' trigger uses), the renders, and access.
public enum FleetSchema {
    public static let migrations: [Migration] = QueueMigrations.all + LiveSettingsMigrations.all + CallbackMigrations.all + RenderMigrations.all + AccessMigrations.all
}
