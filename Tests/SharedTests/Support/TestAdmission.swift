import FleetPostgres
@testable import Renders

extension RenderAdmission {
    /// Render admission running for the rest of the test process, as the dispatcher runs its
    /// own; every request waits for a read started after it arrived, so a test that changes
    /// the load between requests sees its change.
    static func running(on pool: PostgresPool) -> RenderAdmission {
        let admission = RenderAdmission(pool: pool, maxAge: .zero)
        _ = Task { await admission.run() }
        return admission
    }
}
