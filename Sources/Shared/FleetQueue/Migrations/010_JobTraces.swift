import FleetPostgres

extension QueueMigrations {
    /// The W3C traceparent of the span that enqueued a job (`docs/operations.md`, "Traces"), so
    /// the worker that claims it continues the trace; NULL when tracing was off. A nullable
    /// column without a default is added to the catalogue only: no rewrite of the table.
    /// Released as part of version 10 with the callback's trace (FleetCallbacks).
    static let jobTraces = Migration(version: 10, name: "job traces", sql: """
        ALTER TABLE jobs ADD COLUMN trace_parent text;
        """)
}
