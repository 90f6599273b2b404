import FleetPostgres

extension QueueMigrations {
    /// The URL a job's ending is posted to (`NewJob.callbackURL`). Released as part of version 7,
    /// "completion callbacks", with FleetCallbacks' trigger and the renders' own (Renders).
    static let jobCallbackColumn = Migration(version: 7, name: "completion callbacks", sql: """
        ALTER TABLE jobs ADD COLUMN callback_url text;
        """)
}
