import DispatcherCore
import FakeProviders
import FleetSupport
@testable import FleetTestSupport
import Foundation
@testable import Providers
@testable import Renders
import Testing

/// `POST /webhooks/fal` over real HTTP on the dispatcher's listener, against a real database,
/// signed by FakeFal (ED25519, its JWKS).
@Suite struct WebhookEndpointTests {
    static func falBody(_ requestID: String) -> Data {
        Data(#"{"request_id":"\#(requestID)","status":"OK","payload":{"images":[{"url":"https://v3.fal.media/x.jpg"}]}}"#.utf8)
    }

    /// A database, a fake fal (for its keys) and the dispatcher's listener verifying against them.
    func withFal(maxBodyBytes: Int = 8 << 20, _ body: (TestQueue, FakeFal, DispatcherHTTPHarness) async throws -> Void) async throws {
        let q = try await TestQueue.make()
        let fal = try await FakeFal.start()
        do {
            try await DispatcherHTTPHarness.with(
                databaseURL: q.url, webhooks: WebhookSettings(falJWKSURL: fal.jwksURL, maxBodyBytes: maxBodyBytes)
            ) { try await body(q, fal, $0) }
        } catch {
            await fal.stop()
            throw error
        }
        await fal.stop()
    }

    func storedEvents(_ q: TestQueue, provider: String) async throws -> [String: String] {
        var events: [String: String] = [:]
        for row in try await q.pool.query("SELECT request_id, payload::text AS payload FROM provider_events WHERE provider = $1", [provider]).rows {
            events[try row.string("request_id")] = try row.string("payload")
        }
        return events
    }

    // MARK: fal

    @Test func aValidFalWebhookIsStoredAndAnnounced() async throws {
        try await withFal { q, fal, http in
            let log = try await RenderEventLog(databaseURL: q.url)
            defer { log.stop() }
            let body = Self.falBody("req-valid")
            let response = try await http.post("/webhooks/fal", body: body, headers: fal.webhookHeaders(body: body, requestID: "req-valid"))
            #expect(response.status == 200, "\(response.text)")
            #expect(response.field("stored") as? Bool == true)
            try await log.waitFor("the announcement") { $0.payloads == ["req-valid"] }
            // The body rides with its announcement: the worker waiting for it reads no table.
            let carried = try #require(log.announcements.first?.payload)
            #expect(try FalWebhookPayload.decode(carried).requestID == "req-valid")
            let stored = try await storedEvents(q, provider: "fal")
            #expect(Array(stored.keys) == ["req-valid"])
            // Stored as sent (jsonb normalises spacing only), and readable the way the render worker reads it.
            let payload = try #require(try await RenderStore(pool: q.pool).providerEvent(provider: "fal", requestID: "req-valid"))
            #expect(try FalWebhookPayload.decode(payload).requestID == "req-valid")
        }
    }

    @Test func aReplayedFalWebhookIsAcknowledgedButAppliedOnce() async throws {
        try await withFal { q, fal, http in
            let log = try await RenderEventLog(databaseURL: q.url)
            defer { log.stop() }
            let body = Self.falBody("req-replay")
            let headers = fal.webhookHeaders(body: body, requestID: "req-replay")
            let first = try await http.post("/webhooks/fal", body: body, headers: headers)
            let second = try await http.post("/webhooks/fal", body: body, headers: headers)
            #expect(first.status == 200 && second.status == 200)
            #expect(first.field("stored") as? Bool == true)
            #expect(second.field("stored") as? Bool == false)
            // A later webhook's announcement comes after any the replay could have made.
            let later = Self.falBody("req-later")
            #expect(try await http.post("/webhooks/fal", body: later, headers: fal.webhookHeaders(body: later, requestID: "req-later")).status == 200)
            try await log.waitFor("the later announcement") { $0.payloads.contains("req-later") }
            #expect(log.payloads == ["req-replay", "req-later"], "announced once")
            #expect(Set(try await storedEvents(q, provider: "fal").keys) == ["req-replay", "req-later"])
        }
    }

    @Test func aBadSignatureIsRefusedWith401() async throws {
        try await withFal { q, fal, http in
            let body = Self.falBody("req-bad")
            var headers = fal.webhookHeaders(body: body, requestID: "req-bad")
            let good = try #require(headers["X-Fal-Webhook-Signature"])
            headers["X-Fal-Webhook-Signature"] = (good.first == "0" ? "1" : "0") + good.dropFirst()
            let response = try await http.post("/webhooks/fal", body: body, headers: headers)
            #expect(response.status == 401, "\(response.text)")
            #expect(try await storedEvents(q, provider: "fal").isEmpty)
        }
    }

    @Test func aBodyAlteredAfterSigningIsRefusedWith401() async throws {
        try await withFal { q, fal, http in
            let headers = fal.webhookHeaders(body: Self.falBody("req-altered"), requestID: "req-altered")
            let altered = Data(#"{"request_id":"req-altered","status":"ERROR","error":"Invalid status code: 422","payload":null}"#.utf8)
            let response = try await http.post("/webhooks/fal", body: altered, headers: headers)
            #expect(response.status == 401, "\(response.text)")
            #expect(try await storedEvents(q, provider: "fal").isEmpty)
        }
    }

    @Test func aKeyOutsideFalsKeySetIsRefusedWith401() async throws {
        try await withFal { q, fal, http in
            let body = Self.falBody("req-unknown-key")
            let headers = fal.webhookHeaders(body: body, requestID: "req-unknown-key", key: FalSigningKey())
            let response = try await http.post("/webhooks/fal", body: body, headers: headers)
            #expect(response.status == 401, "\(response.text)")
            #expect((response.field("error") as? String)?.contains("does not verify") == true)
            #expect(try await storedEvents(q, provider: "fal").isEmpty)
        }
    }

    @Test func everyMissingHeaderIsRefusedWith401() async throws {
        try await withFal { q, fal, http in
            let body = Self.falBody("req-missing")
            let signed = fal.webhookHeaders(body: body, requestID: "req-missing")
            for name in signed.keys {
                var headers = signed
                headers[name] = nil
                let response = try await http.post("/webhooks/fal", body: body, headers: headers)
                #expect(response.status == 401, "without \(name): \(response.text)")
                #expect((response.field("error") as? String)?.contains(name.lowercased()) == true)
            }
            #expect(try await storedEvents(q, provider: "fal").isEmpty)
        }
    }

    @Test func aStaleTimestampIsRefusedWith400() async throws {
        try await withFal { q, fal, http in
            let body = Self.falBody("req-stale")
            let headers = fal.webhookHeaders(body: body, requestID: "req-stale", timestamp: Date().addingTimeInterval(-400))
            let response = try await http.post("/webhooks/fal", body: body, headers: headers)
            #expect(response.status == 400, "\(response.text)")
            #expect(try await storedEvents(q, provider: "fal").isEmpty)
        }
    }

    @Test func aSignedBodyThatIsNotFalsJSONIsRefusedWith400() async throws {
        try await withFal { q, fal, http in
            let body = Data("not json".utf8)
            let response = try await http.post("/webhooks/fal", body: body, headers: fal.webhookHeaders(body: body, requestID: "req-junk"))
            #expect(response.status == 400, "\(response.text)")
            #expect(try await storedEvents(q, provider: "fal").isEmpty)
        }
    }

    @Test func aBodyOverTheCapIsRefusedWith413() async throws {
        try await withFal(maxBodyBytes: 1024) { q, fal, http in
            let body = Data(#"{"request_id":"req-big","status":"OK","payload":{"pad":"\#(String(repeating: "x", count: 2048))"}}"#.utf8)
            let response = try await http.post("/webhooks/fal", body: body, headers: fal.webhookHeaders(body: body, requestID: "req-big"))
            #expect(response.status == 413, "\(response.text)")
            #expect(try await storedEvents(q, provider: "fal").isEmpty)
        }
    }

    @Test func unreachableFalKeysAnswer503SoFalDeliversAgain() async throws {
        let q = try await TestQueue.make()
        let fal = try await FakeFal.start()
        defer { Task { await fal.stop() } }
        let nowhere = "http://127.0.0.1:\(try freePort())/.well-known/jwks.json"
        try await DispatcherHTTPHarness.with(databaseURL: q.url, webhooks: WebhookSettings(falJWKSURL: nowhere)) { http in
            let body = Self.falBody("req-nokeys")
            let response = try await http.post("/webhooks/fal", body: body, headers: fal.webhookHeaders(body: body, requestID: "req-nokeys"))
            #expect(response.status == 503, "\(response.text)")
            #expect(try await storedEvents(q, provider: "fal").isEmpty)
        }
    }

    @Test func webhookSettingsReadTheJWKSURL() throws {
        #expect(try WebhookSettings.load(from: [:]).falJWKSURL == FalWebhookVerifier.defaultJWKSURL)
        #expect(throws: ConfigurationError.self) { try WebhookSettings.load(from: ["FLEET_FAL_JWKS_URL": "ftp://keys"]) }
    }
}
