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
        let rendering: Result<[ProviderResult], any Error>
        do {
            rendering = .success(try await Self.render(500, with: provider))
        } catch {
            rendering = .failure(error)
        }
        let elapsed = ContinuousClock.now - started
        await fal.stop()  // before a failure is thrown too: a fake left serving outlives its test
        let outcomes = try rendering.get()
        #expect(outcomes.count == 500 && outcomes.allSatisfy { $0.image != nil })
        // One at a time would take 1,000 s; the bound leaves room for a loaded machine.
        #expect(elapsed < .seconds(60), "500 renders of 2 s took \(elapsed)")
    }

    /// Submits `count` renders at once, each settled after 2 s.
    static func render(_ count: Int, with provider: FashnProvider) async throws -> [ProviderResult] {
        try await withThrowingTaskGroup(of: ProviderResult.self) { group in
            for _ in 0..<count {
                group.addTask {
                    let submission = try await provider.submit(Samples.request())
                    try await Task.sleep(for: .seconds(2))
                    return try await settle(provider, submission, limit: .seconds(20))
                }
            }
            return try await group.reduce(into: [ProviderResult]()) { $0.append($1) }
        }
    }
}
