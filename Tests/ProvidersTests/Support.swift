import FakeProviders
import FleetHTTPClient
import Foundation
@testable import Providers
@testable import Renders
import Synchronization
import Testing

/// A clock the test moves by hand.
final class TestClock: Sendable {
    private let current = Mutex(Date())
    var now: @Sendable () -> Date { { self.current.withLock { $0 } } }
    func advance(_ seconds: TimeInterval) { current.withLock { $0 += seconds } }
}

enum Samples {
    static let person = TryOnImage(bytes: Data("person-photo-bytes".utf8) + FakeImages.jpeg)
    static let garment = TryOnImage(bytes: Data("garment-cutout".utf8) + FakeImages.jpeg, mimeType: "image/png")

    static func request(_ category: GarmentCategory = .tops, webhook: String? = nil, timeout: Duration = .seconds(10)) -> TryOnRequest {
        TryOnRequest(person: person, garment: garment, category: category, options: TryOnOptions(webhookURL: webhook, timeout: timeout))
    }
}

/// Polls like the render worker until the provider settles, within `limit`.
func settle(_ provider: any TryOnProvider, _ submission: ProviderSubmission, limit: Duration = .seconds(10)) async throws -> ProviderResult {
    let deadline = ContinuousClock.now + limit
    while ContinuousClock.now < deadline {
        let result = try await provider.result(of: submission)
        if result != .pending { return result }
        try await Task.sleep(for: .milliseconds(20))
    }
    Issue.record("not settled within \(limit)")
    return .pending
}

/// Runs `body` against a fresh FakeFal and stops it whatever happens.
func withFakeFal(_ body: (FakeFal, CurlHTTPClient) async throws -> Void) async throws {
    let http = CurlHTTPClient()
    let fal = try await FakeFal.start(webhookClient: http)
    do { try await body(fal, http) } catch {
        await fal.stop()
        throw error
    }
    await fal.stop()
}

func withFakeGoogle(_ body: (FakeGoogleVTO, CurlHTTPClient) async throws -> Void) async throws {
    let http = CurlHTTPClient()
    let google = try await FakeGoogleVTO.start()
    do { try await body(google, http) } catch {
        await google.stop()
        throw error
    }
    await google.stop()
}

extension ProviderResult {
    var image: ProviderImage? { if case .succeeded(let image) = self { image } else { nil } }
    var failure: ProviderFailure? { if case .failed(let failure) = self { failure } else { nil } }
}
