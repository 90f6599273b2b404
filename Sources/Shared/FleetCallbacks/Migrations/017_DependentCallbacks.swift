import FleetPostgres

extension CallbackMigrations {
    /// A job waiting for its dependencies that ends (`DEPENDENCY_FAILED`, or a cancel) gets its
    /// callback like any other: the trigger's `WHEN` admits the `waiting` state (added by version
    /// 16, FleetQueue, and usable from this version on). Released as part of version 17 with the
    /// queue's dependencies.
    static let dependentCallbacks = Migration(version: 17, name: "job dependencies", sql: """
        DROP TRIGGER jobs_callback ON jobs;
        CREATE TRIGGER jobs_callback AFTER UPDATE OF state ON jobs FOR EACH ROW
            WHEN (NEW.callback_url IS NOT NULL AND NEW.state IN ('completed', 'dead', 'cancelled')
                  AND OLD.state IN ('waiting', 'available', 'running'))
            EXECUTE FUNCTION jobs_enqueue_callback();
        """)
}
