import FleetPostgres

extension RenderMigrations {
    /// Why a failed render failed: `failure_code` (a `RenderFailureCode`) and `error_message` (for
    /// people, no secret, at most 500 characters), written by the statement that fails it and
    /// carried by its completion callback. A render failed for a technical reason no longer spends
    /// its onboarding token: one token may hold several failed renders, and at most one that is
    /// open or complete (the rest of the rule, the kinds of failure and the bound, is the request's,
    /// under the token's row lock: `EphemeralTokens.spentRefusal`).
    static let renderFailureReasons = Migration(version: 23, name: "render failure reasons", sql: """
        ALTER TABLE renders ADD COLUMN failure_code text, ADD COLUMN error_message text,
            ADD CONSTRAINT renders_reason_only_if_failed CHECK (status = 'failed' OR (failure_code IS NULL AND error_message IS NULL)),
            ADD CONSTRAINT renders_error_message_bounded CHECK (char_length(error_message) <= 500);
        DROP INDEX renders_one_per_token_idx;
        -- One open or complete onboarding render per ephemeral token; failed ones are counted by the request.
        CREATE UNIQUE INDEX renders_one_live_per_token_idx ON renders (ephemeral_token_id)
            WHERE ephemeral_token_id IS NOT NULL AND status <> 'failed';
        CREATE INDEX renders_token_idx ON renders (ephemeral_token_id) WHERE ephemeral_token_id IS NOT NULL;
        \(renderCallbackFunction(replacing: true, carryingTrace: true, withGarmentInput: true, withFailure: true))
        """)
}
