import Foundation
@testable import Providers
@testable import Renders
import Testing

/// The one list of failure reasons: what each costs, and the messages stored for people.
@Suite struct RenderFailureCodeTests {
    @Test func onlyAVerdictOnThePhotosIsNotTechnical() {
        #expect(RenderFailureCode.allCases.filter { !$0.isTechnical } == [.providerRejected, .imageInvalid])
        #expect(RenderFailureCode.allCases.filter { $0.errorCode == .renderTimeout } == [.providerRateLimited, .timeout])
    }

    /// Each provider error and provider job failure maps to the code that says whose fault it is.
    @Test func providerErrorsMapToTheirFailureCodes() {
        let cases: [(ProviderError, RenderFailureCode)] = [
            (.transient(provider: "fal", reason: "HTTP 503"), .providerDown),
            (.malformedResponse(provider: "fal", reason: "not JSON"), .providerDown),
            (.failed(provider: "fal", reason: "TLS"), .providerDown),
            (.rateLimited(provider: "fal", retryAfter: nil), .providerRateLimited),
            (.unauthorized(provider: "fal", reason: "HTTP 401"), .providerMisconfigured),
            (.unsupportedCategory(provider: "fal", .shoes), .providerMisconfigured),
            (.rejected(provider: "fal", status: 404, message: "no such model"), .providerMisconfigured),
            (.rejected(provider: "fal", status: 422, message: "person not detected"), .providerRejected),
        ]
        for (error, code) in cases { #expect(error.renderFailure.code == code, "\(error)") }
        #expect(ProviderFailure(code: "runner_server_error", message: "CUDA", retryable: true).renderFailure(provider: "fal").code == .providerDown)
        #expect(ProviderFailure(code: "http_502", message: "bad gateway", retryable: false).renderFailure(provider: "fal").code == .providerDown)
        #expect(ProviderFailure(code: "rai_filtered", message: "filtered", retryable: false).renderFailure(provider: "g").code == .providerRejected)
    }

    @Test func messagesAreOneBoundedLineWithoutCredentials() {
        let leaked = RenderFailure(.providerRejected, """
            HTTP 422: {"detail":"bad"}, sent with Authorization: Bearer eyJhbGciOi.secret.sig
            and Key abcd-1234-efgh, url https://x/v1?key=AIzaSyD-secret&x=1 "api_key": "sk_live_9" token=tok_123456 password: hunter22
            """)
        for secret in ["eyJhbGciOi.secret.sig", "abcd-1234-efgh", "AIzaSyD-secret", "sk_live_9", "tok_123456", "hunter22"] {
            #expect(!leaked.message.contains(secret), "\(leaked.message)")
        }
        #expect(leaked.message.contains("HTTP 422") && !leaked.message.contains("\n"), "\(leaked.message)")
        // What names a setting without its value is kept whole.
        #expect(RenderFailure(.providerMisconfigured, "configuration error: FAL_KEY: required by provider fal-fashn").message
            == "configuration error: FAL_KEY: required by provider fal-fashn")
        let long = RenderFailure(.providerDown, String(repeating: "x", count: 2000))
        #expect(long.message.count == RenderFailure.maxMessageLength && long.message.hasSuffix("…"))
    }
}
