import FleetPostgres

extension RenderMigrations {
    /// How many times an operator retried a failed render (`render.retry`): each retry is a new
    /// end, so its credit's ledger keys (`CreditLedger.entryKey`) and its completion callback's
    /// idempotency key and `webhook-id` carry the count from the first retry on, and the event says
    /// it. The failed renders' index serves the operators' search (`RenderRetries.failed`).
    static let renderRetries = Migration(version: 24, name: "render retries", sql: """
        ALTER TABLE renders ADD COLUMN retries integer NOT NULL DEFAULT 0 CHECK (retries >= 0);
        CREATE INDEX renders_failed_idx ON renders (updated_at, id) WHERE status = 'failed';
        \(renderCallbackFunction(replacing: true, carryingTrace: true, withGarmentInput: true, withFailure: true, withRetries: true))
        """)
}
