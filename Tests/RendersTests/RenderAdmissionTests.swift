@testable import DispatcherCore
import DispatcherProtocol
@testable import FleetQueue
@testable import FleetTestSupport
@testable import Providers
@testable import Renders
import Testing

/// Render admission as the dispatcher runs it, over a real database (its ledger, a value, is
/// `AdmissionLedgerTests`).
@Suite struct RenderAdmissionTests {
    /// The service on a real database: the estimate it reads, and once it stops, requests
    /// refused as by a dispatcher shutting down instead of left waiting.
    @Test func aStoppedAdmissionAnswersUnavailable() async throws {
        let q = try await TestQueue.make()
        try await q.driver.limitSet(ConcurrencyLimit(key: RenderCapacity.providerKey(FashnProvider.name), maxRunning: 7), by: "test")
        try await RenderSettings(provider: FashnProvider.name, enabledCategories: [.tops]).save(to: q.pool)
        let admission = RenderAdmission(pool: q.pool, maxAge: .zero)
        let running = Task { await admission.run() }
        let estimate = try await admission.estimate()
        #expect(estimate.settings.provider == FashnProvider.name && estimate.load.rule?.maxRunning == 7)
        running.cancel()
        await running.value
        await #expect(throws: RenderAdmission.Stopped.self) { try await admission.estimate() }
        #expect(DispatcherError(mapping: RenderAdmission.Stopped()).code == .unavailable)
    }
}
