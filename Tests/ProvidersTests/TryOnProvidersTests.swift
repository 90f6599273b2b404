import FakeProviders
import FleetHTTPClient
import FleetSupport
import Foundation
@testable import Providers
@testable import Renders
import Testing

/// Choosing and configuring the provider from the environment.
@Suite struct TryOnProvidersTests {
    @Test func eachNameMakesItsProvider() throws {
        let settings = try ProviderSettings.load(from: ["FAL_KEY": "k", "GOOGLE_ACCESS_TOKEN": "t", "GOOGLE_CLOUD_PROJECT": "p"])
        for name in TryOnProviders.names {
            #expect(try TryOnProviders.make(name: name, settings: settings, http: CurlHTTPClient()).name == name)
        }
        let fashn = try TryOnProviders.make(name: "fal-fashn", settings: settings, http: CurlHTTPClient())
        #expect(fashn.supportedCategories == [.tops, .bottoms, .dresses, .outerwear])
    }

    /// What the generic code asks of the providers instead of naming them.
    @Test func theRegistrationsAnswerForTheirProviders() throws {
        #expect(TryOnProviders.names == ["local", "fal-fashn", "fal-nano-banana-pro", "google-vto"])
        #expect(TryOnProviders.defaultName == "local")
        #expect(TryOnProviders.assumedLatency("local") == .seconds(1) && TryOnProviders.assumedLatency("google-vto") == .seconds(12))
        #expect(TryOnProviders.supportedCategories("fal-fashn") == [.tops, .bottoms, .dresses, .outerwear])
        #expect(TryOnProviders.supportedCategories("replicate").isEmpty)
        // fal's two models share one webhook endpoint, served once.
        #expect(TryOnProviders.webhookSources(settings: WebhookSettings(), http: CurlHTTPClient()).map(\.provider) == ["fal"])
        let settings = try ProviderSettings.load(from: ["FAL_KEY": "k", "GOOGLE_ACCESS_TOKEN": "t", "GOOGLE_CLOUD_PROJECT": "p"])
        let sources = try TryOnProviders.names.map { try TryOnProviders.make(name: $0, settings: settings, http: CurlHTTPClient()).webhookSource }
        #expect(sources == [nil, "fal", "fal", nil])
    }

    @Test func missingSettingsNameTheirVariableNotTheirValue() throws {
        let empty = try ProviderSettings.load(from: [:])
        #expect(throws: ConfigurationError.self) { try TryOnProviders.make(name: "fal-fashn", settings: empty, http: CurlHTTPClient()) }
        do {
            _ = try TryOnProviders.make(name: "fal-nano-banana-pro", settings: empty, http: CurlHTTPClient())
        } catch {
            #expect(error.description == "configuration error: FAL_KEY: required by provider fal-nano-banana-pro")
        }
        #expect(throws: ConfigurationError.self) { try TryOnProviders.make(name: "replicate", settings: empty, http: CurlHTTPClient()) }
        #expect(throws: ConfigurationError.self) { try ProviderSettings.load(from: ["FAL_FASHN_MODE": "fastest"]) }

        let key = FileManager.default.temporaryDirectory.appendingPathComponent("not-a-key-\(UUID().uuidString).json")
        try Data(#"{"client_email":"a@b","private_key":"-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n"}"#.utf8).write(to: key)
        defer { try? FileManager.default.removeItem(at: key) }
        let badKey = try ProviderSettings.load(from: ["GOOGLE_APPLICATION_CREDENTIALS": key.path, "GOOGLE_CLOUD_PROJECT": "p"])
        do {
            _ = try TryOnProviders.make(name: "google-vto", settings: badKey, http: CurlHTTPClient())
            Issue.record("a bad key was accepted")
        } catch {
            #expect(error.variable == "GOOGLE_APPLICATION_CREDENTIALS" && !error.description.contains("c2VjcmV0"))
        }
    }

    /// The configured Google provider, key file from the environment, against the fake.
    @Test func googleFromAKeyFileRendersAgainstTheFake() async throws {
        try await withFakeGoogle { google, http in
            let key = FileManager.default.temporaryDirectory.appendingPathComponent("sa-\(UUID().uuidString).json")
            try google.serviceAccountKeyJSON.write(to: key)
            defer { try? FileManager.default.removeItem(at: key) }
            let settings = try ProviderSettings.load(from: ["GOOGLE_APPLICATION_CREDENTIALS": key.path, "GOOGLE_VTO_ENDPOINT": google.baseURL])
            let provider = try TryOnProviders.make(name: "google-vto", settings: settings, http: http)
            let result = try await provider.result(of: try await provider.submit(Samples.request(.outerwear)))
            #expect(result.image != nil)
            #expect(google.tokenGrants == 1)
        }
    }

    @Test func falFromTheEnvironmentRendersAgainstTheFake() async throws {
        try await withFakeFal { fal, http in
            let settings = try ProviderSettings.load(from: ["FAL_KEY": fal.key, "FAL_QUEUE_URL": fal.baseURL, "FAL_FASHN_MODE": "performance"])
            let provider = try TryOnProviders.make(name: "fal-fashn", settings: settings, http: http)
            #expect(try await settle(provider, try await provider.submit(Samples.request())).image != nil)
            #expect(fal.requests.first?.json?["mode"] as? String == "performance")
        }
    }
}
