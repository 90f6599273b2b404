import FakeProviders
import FleetHTTPClient
import Foundation
@testable import Providers
@testable import Renders
import Testing

/// fleet-bench will hold hundreds of renders in flight against FakeFal: it must serve them all at
/// once. The time they take is a benchmark's claim (`fleet-bench render --in-flight 500`, its rate
/// against the ideal in-flight / latency); this test counts.
@Suite struct FakeFalLoadTests {
    @Test func fiveHundredRendersInFlightAllComplete() async throws {
        let http = CurlHTTPClient()
        let fal = try await FakeFal.start(recordRequests: false)
        fal.update { $0.latency = .seconds(2) }
        let provider = FashnProvider(key: fal.key, queueURL: fal.baseURL, http: http)
        let rendering: Result<[ProviderResult], any Error>
        do {
            rendering = .success(try await Self.render(500, with: provider))
        } catch {
            rendering = .failure(error)
        }
        await fal.stop()  // before a failure is thrown too: a fake left serving outlives its test
        let outcomes = try rendering.get()
        #expect(outcomes.count == 500 && outcomes.allSatisfy { $0.image != nil })
        // Jobs overlapped at the fake: more than one unfinished at once (how many depends on how
        // fast the machine submits, which is the benchmark's business).
        #expect(fal.maxConcurrency > 1, "at most \(fal.maxConcurrency) unfinished at once")
    }

    /// Submits `count` renders at once, each settled after 2 s.
    static func render(_ count: Int, with provider: FashnProvider) async throws -> [ProviderResult] {
        try await withThrowingTaskGroup(of: ProviderResult.self) { group in
            for _ in 0..<count {
                group.addTask {
                    let submission = try await provider.submit(Samples.request())
                    // Asks first after the fake's latency, as the worker would, rather than 500
                    // tasks polling from the start; the limit only guards against a hang.
                    try await Task.sleep(for: .seconds(2))
                    return try await settle(provider, submission, limit: .seconds(300))
                }
            }
            return try await group.reduce(into: [ProviderResult]()) { $0.append($1) }
        }
    }
}
