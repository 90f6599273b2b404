import FleetPostgres

extension RenderMigrations {
    /// A render given a `callbackUrl` gets a `callback.deliver` job in the transaction that ends
    /// it, whoever ends it (its worker, the timeout sweep, the token expiry). Released as part of
    /// version 7, "completion callbacks", after FleetCallbacks' part (`fleet_wire_time`).
    static let renderCallbacks = Migration(version: 7, name: "completion callbacks", sql: """
        ALTER TABLE renders ADD COLUMN callback_url text;

        \(renderCallbackFunction(replacing: false, carryingTrace: false))
        CREATE TRIGGER renders_callback AFTER UPDATE OF status ON renders FOR EACH ROW
            WHEN (NEW.callback_url IS NOT NULL AND NEW.status IN ('complete', 'failed') AND OLD.status IN ('pending', 'processing'))
            EXECUTE FUNCTION renders_enqueue_callback();
        """)
}
