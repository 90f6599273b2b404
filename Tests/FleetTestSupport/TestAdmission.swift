import FleetPostgres
@testable import Renders

extension RenderAdmission {
    /// Render admission running for the rest of the test process, as the dispatcher runs its
    /// own; every request waits for a read started after it arrived, so a test that changes
    /// the load between requests sees its change. It reads the database at `databaseURL` over
    /// a pool of one connection of its own: holding the test's pool for the rest of the
    /// process kept up to ten connections per test open, and the suite ran out of the
    /// server's connections.
    static func running(on databaseURL: String) -> RenderAdmission {
        let admission = RenderAdmission(pool: PostgresPool(conninfo: databaseURL, maxConnections: 1), maxAge: .zero)
        _ = Task { await admission.run() }
        return admission
    }
}
