import FakeProviders
import FleetHTTPClient
import Foundation
@testable import Providers
@testable import Renders
import Testing
import _CryptoExtras

/// Google Virtual Try-On against FakeGoogleVTO over loopback HTTP, with each way of authenticating.
@Suite struct GoogleVirtualTryOnTests {
    static func provider(_ google: FakeGoogleVTO, _ http: CurlHTTPClient, _ credentials: GoogleCredentials, clock: TestClock = TestClock()) -> GoogleVirtualTryOnProvider {
        GoogleVirtualTryOnProvider(
            endpoint: .init(project: google.project, baseURL: google.baseURL),
            tokens: GoogleAccessTokens(credentials, http: http, now: clock.now), http: http)
    }

    static func serviceAccount(_ google: FakeGoogleVTO) throws -> GoogleCredentials {
        .serviceAccount(try GoogleServiceAccountKey(json: google.serviceAccountKeyJSON))
    }

    @Test func aServiceAccountKeyGetsATokenAndTheRenderComesBackInTheSubmission() async throws {
        try await withFakeGoogle { google, http in
            let provider = Self.provider(google, http, try Self.serviceAccount(google))
            let submission = try await provider.submit(Samples.request(.bottoms))
            #expect(submission.provider == "google-vto" && submission.jobID.hasPrefix("vto-"))
            let result = try await provider.result(of: submission)
            #expect(result == .succeeded(.bytes(FakeImages.jpeg, mimeType: "image/jpeg")))
            let fetched = try await ProviderImageFetcher(http: http).fetch(try #require(result.image), provider: provider.name)
            #expect(fetched.bytes == FakeImages.jpeg)
            #expect(google.tokenGrants == 1)

            let predict = try #require(google.predictRequests.first)
            #expect(predict.headers["authorization"]?.hasPrefix("Bearer ya29.fake-") == true)
            let body = try #require(predict.json)
            let instance = try #require((body["instances"] as? [[String: Any]])?.first)
            let person = (instance["personImage"] as? [String: Any])?["image"] as? [String: Any]
            #expect(person?["bytesBase64Encoded"] as? String == Samples.person.bytes.base64EncodedString())
            let product = ((instance["productImages"] as? [[String: Any]])?.first?["image"]) as? [String: Any]
            #expect(product?["bytesBase64Encoded"] as? String == Samples.garment.bytes.base64EncodedString())
            #expect((body["parameters"] as? [String: Any])?["sampleCount"] as? Int == 1)
        }
    }

    @Test func theMetadataServerProvidesTheToken() async throws {
        try await withFakeGoogle { google, http in
            let provider = Self.provider(google, http, .metadataServer(host: google.metadataHost))
            let submission = try await provider.submit(Samples.request())
            #expect(submission.state == .settled(.succeeded(.bytes(FakeImages.jpeg, mimeType: "image/jpeg"))))
            #expect(google.metadataGrants == 1 && google.tokenGrants == 0)
        }
    }

    @Test func aGivenTokenIsUsedAsIs() async throws {
        try await withFakeGoogle { google, http in
            _ = try await Self.provider(google, http, .accessToken(google.staticToken)).submit(Samples.request())
            #expect(google.predictRequests.first?.headers["authorization"] == "Bearer \(google.staticToken)")
            #expect(google.metadataGrants == 0 && google.tokenGrants == 0)

            let error = await #expect(throws: ProviderError.self) {
                try await Self.provider(google, http, .accessToken("expired-token")).submit(Samples.request())
            }
            guard case .unauthorized(_, let reason) = error else { Issue.record("got \(String(describing: error))"); return }
            #expect(reason.contains("UNAUTHENTICATED") && !reason.contains("expired-token"))
        }
    }

    @Test func concurrentRendersShareOneTokenGrant() async throws {
        try await withFakeGoogle { google, http in
            let provider = Self.provider(google, http, try Self.serviceAccount(google))
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<4 { group.addTask { _ = try await provider.submit(Samples.request()) } }
                try await group.waitForAll()
            }
            _ = try await provider.submit(Samples.request())
            #expect(google.tokenGrants == 1)
            #expect(google.predictRequests.count == 5)
        }
    }

    @Test func theTokenIsReusedUntilShortlyBeforeItExpires() async throws {
        try await withFakeGoogle { google, http in
            let clock = TestClock()
            let provider = Self.provider(google, http, .metadataServer(host: google.metadataHost), clock: clock)
            _ = try await provider.submit(Samples.request())
            clock.advance(3599 - 61)
            _ = try await provider.submit(Samples.request())
            #expect(google.metadataGrants == 1)
            clock.advance(2)  // now within the 60 s margin
            _ = try await provider.submit(Samples.request())
            #expect(google.metadataGrants == 2)
        }
    }

    @Test func aKeyGoogleDoesNotKnowIsUnauthorized() async throws {
        try await withFakeGoogle { google, http in
            var key = try #require(try JSONSerialization.jsonObject(with: google.serviceAccountKeyJSON) as? [String: String])
            key["private_key"] = try _RSA.Signing.PrivateKey(keySize: .bits2048).pkcs8PEMRepresentation
            let credentials = GoogleCredentials.serviceAccount(try GoogleServiceAccountKey(json: JSONSerialization.data(withJSONObject: key)))
            let error = await #expect(throws: ProviderError.self) { try await Self.provider(google, http, credentials).submit(Samples.request()) }
            #expect(error == .unauthorized(provider: "google-vto", reason: "token endpoint answered HTTP 400: invalid_grant: Invalid JWT Signature."))
            #expect(google.predictRequests.isEmpty)
        }
    }

    @Test func serverErrorsAreTransientValidationErrorsRejected() async throws {
        try await withFakeGoogle { google, http in
            let provider = Self.provider(google, http, .accessToken(google.staticToken))
            google.update { $0.transientFailures = 1 }
            let transient = await #expect(throws: ProviderError.self) { try await provider.submit(Samples.request()) }
            #expect(transient?.isTransient == true)
            #expect(transient?.description.contains("UNAVAILABLE") == true)
            _ = try await provider.submit(Samples.request())

            google.update { $0.rejection = "Image of the person could not be processed." }
            let rejected = await #expect(throws: ProviderError.self) { try await provider.submit(Samples.request()) }
            #expect(rejected == .rejected(provider: "google-vto", status: 400, message: "INVALID_ARGUMENT: Image of the person could not be processed."))
        }
    }

    @Test func malformedAnswersFilteredImagesAndTimeouts() async throws {
        try await withFakeGoogle { google, http in
            let provider = Self.provider(google, http, .accessToken(google.staticToken))
            google.update { $0.malformed = .htmlPage }
            let malformed = await #expect(throws: ProviderError.self) { try await provider.submit(Samples.request()) }
            guard case .malformedResponse(_, let reason) = malformed else { Issue.record("got \(String(describing: malformed))"); return }
            #expect(reason.contains("predict response is not the documented JSON") && reason.contains("502 Bad Gateway"))
            // Not transient: the render worker ends the render at once and never predicts (pays) again.
            #expect(malformed?.isTransient == false && google.predictRequests.count == 1)

            google.update { $0.malformed = nil; $0.raiFiltered = true }
            let filtered = try await provider.result(of: try await provider.submit(Samples.request()))
            #expect(filtered.failure?.code == "rai_filtered" && filtered.failure?.retryable == false)

            google.update { $0.raiFiltered = false; $0.latency = .seconds(2) }
            let slow = await #expect(throws: ProviderError.self) { try await provider.submit(Samples.request(timeout: .milliseconds(300))) }
            #expect(slow?.isTransient == true)
        }
    }
}
