import FleetPostgres

extension RenderMigrations {
    /// When a worker first started the render (`RenderStore.start`, pending → processing); a worker
    /// that takes it over after a crash keeps it, so admission sees how long the render has been
    /// at its provider rather than since its latest claim (`RenderAdmission`, docs/renders.md
    /// "Admission control"). NULL until started; a retried render starts again from NULL.
    static let renderStartedAt = Migration(version: 26, name: "render started at", sql: """
        ALTER TABLE renders ADD COLUMN started_at timestamptz;
        """)
}
