import FakeProviders
import FleetHTTPClient
import Foundation
@testable import Renders
import Testing

/// fleet-bench will hold hundreds of renders in flight against FakeFal: it must not need a
/// thread or a sleeping task per job.
@Suite struct FakeFalLoadTests {
    @Test func fiveHundredRendersInFlightAllComplete() async throws {
        let http = CurlHTTPClient()
        let fal = try await FakeFal.start(recordRequests: false)
        fal.update { $0.latency = .seconds(2) }
        let provider = FashnProvider(key: fal.key, queueURL: fal.baseURL, http: http)
        let started = ContinuousClock.now
        let outcomes = try await withThrowingTaskGroup(of: ProviderResult.self) { group in
            for _ in 0..<500 {
                group.addTask {
                    let submission = try await provider.submit(Samples.request())
                    try await Task.sleep(for: .seconds(2))
                    return try await settle(provider, submission, limit: .seconds(20))
                }
            }
            return try await group.reduce(into: [ProviderResult]()) { $0.append($1) }
        }
        let elapsed = ContinuousClock.now - started
        await fal.stop()
        #expect(outcomes.count == 500 && outcomes.allSatisfy { $0.image != nil })
        // One at a time would take 1,000 s; the bound leaves room for a loaded machine.
        #expect(elapsed < .seconds(60), "500 renders of 2 s took \(elapsed)")
    }
}
