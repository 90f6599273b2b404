import FleetPostgres

extension QueueMigrations {
    /// Running jobs by kind: `jobPendingMatching` (a render looking for the image jobs still
    /// making its photos, three times a render) found running jobs of a kind only by reading
    /// every running job, the render jobs in flight included (1 ms a look at 100 renders in
    /// flight, growing with them; `docs/scaling.md`). One more index entry per claim, written by
    /// the claim's update, which touches the indexes anyway (the state is in their predicates).
    static let runningJobsByKind = Migration(version: 27, name: "running jobs by kind", sql: """
        CREATE INDEX jobs_running_kind_idx ON jobs (kind) WHERE state = 'running';
        """)
}
