import FleetPostgres

extension CallbackMigrations {
    /// A job's completion callback joins the job's trace (`trace_parent`, FleetQueue's part of
    /// version 10, which comes first).
    static let jobCallbackTraces = Migration(version: 10, name: "job traces", sql: """
        \(jobCallbackFunction(replacing: true, carryingTrace: true))
        """)
}
