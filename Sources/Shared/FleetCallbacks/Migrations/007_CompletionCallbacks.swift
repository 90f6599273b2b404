import FleetPostgres

extension CallbackMigrations {
    /// Completion callbacks: a job given a `callbackUrl` gets a `callback.deliver` job from the
    /// database itself, in the transaction that ends it, whoever ends it (a worker's outcome, a
    /// cancel, the rescuer, the sweeps): nothing can end without its callback, and a kill -9 loses
    /// neither. The idempotency key makes it one per ending. `fleet_wire_time` formats times as
    /// the protocol does. Released as version 7 with the job's column (FleetQueue) and the renders'
    /// trigger (Renders), which follows this part and uses `fleet_wire_time`.
    static let completionCallbacks = Migration(version: 7, name: "completion callbacks", sql: """
        CREATE FUNCTION fleet_wire_time(at timestamptz) RETURNS text LANGUAGE sql STABLE
            RETURN to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');

        \(jobCallbackFunction(replacing: false, carryingTrace: false))
        -- Rows without a callback_url pay only this WHEN test.
        CREATE TRIGGER jobs_callback AFTER UPDATE OF state ON jobs FOR EACH ROW
            WHEN (NEW.callback_url IS NOT NULL AND NEW.state IN ('completed', 'dead', 'cancelled')
                  AND OLD.state IN ('available', 'running'))
            EXECUTE FUNCTION jobs_enqueue_callback();
        """)
}
