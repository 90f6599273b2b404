import FleetPostgres

extension RenderMigrations {
    /// Each render provider's recent latency (an exponentially weighted mean of its renders'
    /// run times), for the dispatcher's admission control (`RENDER_BUSY`).
    static let providerLatency = Migration(version: 6, name: "provider latency", sql: """
        CREATE TABLE provider_latency (
            provider text PRIMARY KEY,
            seconds double precision NOT NULL CHECK (seconds >= 0),
            samples bigint NOT NULL DEFAULT 1,
            updated_at timestamptz NOT NULL DEFAULT now()
        );
        """)
}
