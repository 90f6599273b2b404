import CSodium
import Crypto
import FakeProviders
import FleetHTTPClient
import Foundation
import Hummingbird
@testable import Providers
@testable import Renders
import Synchronization
import Testing

/// Webhook signatures: FakeFal signs as fal does, FalWebhookVerifier checks as the dispatcher will.
@Suite struct FalWebhookTests {
    static let body = Data(#"{"request_id":"req-1","status":"OK","payload":{"images":[{"url":"https://v3.fal.media/x.jpg"}]}}"#.utf8)

    static func verifier(_ fal: FakeFal, _ http: CurlHTTPClient, clock: TestClock = TestClock()) -> FalWebhookVerifier {
        FalWebhookVerifier(http: http, jwksURL: fal.jwksURL, now: clock.now)
    }

    @Test func theSignatureVerifiesWithLibsodiumAgainstThePublishedKey() async throws {
        try await withFakeFal { fal, http in
            let headers = fal.webhookHeaders(body: Self.body, requestID: "req-1")
            let signature = try #require(headers["X-Fal-Webhook-Signature"])
            #expect(signature.count == 128)
            let digest = SHA256.hash(data: Self.body).map { String(format: "%02x", $0) }.joined()
            let message = Array("req-1\n\(fal.userID)\n\(headers["X-Fal-Webhook-Timestamp"]!)\n\(digest)".utf8)
            let bytes = stride(from: 0, to: signature.count, by: 2).map { index in
                UInt8(signature[signature.index(signature.startIndex, offsetBy: index)...].prefix(2), radix: 16)!
            }
            // The key as published in the JWKS, not as held by the fake.
            let jwks = try await http.execute(HTTPClientRequest(url: fal.jwksURL))
            let object = try #require(try JSONSerialization.jsonObject(with: jwks.body) as? [String: [[String: String]]])
            let x = try #require(object["keys"]?.first?["x"])
            let key = try #require(Base64URL.decode(x))
            #expect(Array(key) == fal.publicKey)
            #expect(crypto_sign_verify_detached(bytes, message, UInt64(message.count), Array(key)) == 0)
        }
    }

    @Test func aValidWebhookPassesAndTheKeySetIsCached() async throws {
        try await withFakeFal { fal, http in
            let verifier = Self.verifier(fal, http)
            // A burst of first webhooks shares one key fetch.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<8 {
                    let headers = fal.webhookHeaders(body: Self.body, requestID: "burst-\(index)")
                    group.addTask { try await verifier.verify(headers: headers, body: Self.body) }
                }
                try await group.waitForAll()
            }
            try await verifier.verify(headers: fal.webhookHeaders(body: Self.body, requestID: "req-1"), body: Self.body)
            // Header names in any case, as servers hand them over.
            let lower = Dictionary(uniqueKeysWithValues: fal.webhookHeaders(body: Self.body, requestID: "req-2").map { ($0.key.lowercased(), $0.value) })
            try await verifier.verify(headers: lower, body: Self.body)
            #expect(fal.jwksFetches == 1)
        }
    }

    @Test func badSignatureAlteredBodyAndMissingHeaderAreRefused() async throws {
        try await withFakeFal { fal, http in
            let verifier = Self.verifier(fal, http)
            var headers = fal.webhookHeaders(body: Self.body, requestID: "req-1")
            let good = headers["X-Fal-Webhook-Signature"]!
            headers["X-Fal-Webhook-Signature"] = (good.first == "0" ? "1" : "0") + good.dropFirst()
            await #expect(throws: FalWebhookError.invalidSignature) { try await verifier.verify(headers: headers, body: Self.body) }

            let signed = fal.webhookHeaders(body: Self.body, requestID: "req-1")
            var altered = Self.body
            altered[altered.count - 3] = UInt8(ascii: "X")
            await #expect(throws: FalWebhookError.invalidSignature) { try await verifier.verify(headers: signed, body: altered) }

            // Another request id than the one signed.
            var renamed = signed
            renamed["X-Fal-Webhook-Request-Id"] = "req-2"
            await #expect(throws: FalWebhookError.invalidSignature) { try await verifier.verify(headers: renamed, body: Self.body) }

            for name in signed.keys {
                var missing = signed
                missing[name] = nil
                await #expect(throws: FalWebhookError.missingHeader(name.lowercased())) { try await verifier.verify(headers: missing, body: Self.body) }
            }
            var short = signed
            short["X-Fal-Webhook-Signature"] = "abcd"
            await #expect(throws: FalWebhookError.malformedSignature) { try await verifier.verify(headers: short, body: Self.body) }
        }
    }

    @Test func aTimestampMoreThanFiveMinutesAwayIsRefused() async throws {
        try await withFakeFal { fal, http in
            let clock = TestClock()
            let verifier = Self.verifier(fal, http, clock: clock)
            let stale = fal.webhookHeaders(body: Self.body, requestID: "req-1", timestamp: clock.now().addingTimeInterval(-301))
            await #expect(throws: FalWebhookError.staleTimestamp(skewSeconds: 301)) { try await verifier.verify(headers: stale, body: Self.body) }
            let future = fal.webhookHeaders(body: Self.body, requestID: "req-1", timestamp: clock.now().addingTimeInterval(400))
            await #expect(throws: FalWebhookError.self) { try await verifier.verify(headers: future, body: Self.body) }
            let edge = fal.webhookHeaders(body: Self.body, requestID: "req-1", timestamp: clock.now().addingTimeInterval(-290))
            try await verifier.verify(headers: edge, body: Self.body)
            var text = edge
            text["X-Fal-Webhook-Timestamp"] = "2026-11-22T00:00:00Z"
            await #expect(throws: FalWebhookError.malformedTimestamp) { try await verifier.verify(headers: text, body: Self.body) }
        }
    }

    @Test func anUnknownKeyFailsAfterOneRefetch() async throws {
        try await withFakeFal { fal, http in
            let clock = TestClock()
            let verifier = Self.verifier(fal, http, clock: clock)
            try await verifier.verify(headers: fal.webhookHeaders(body: Self.body, requestID: "req-1"), body: Self.body)
            let stranger = FalSigningKey()
            let forged = fal.webhookHeaders(body: Self.body, requestID: "req-1", key: stranger)
            // Within a minute of the last fetch the cached keys decide: no refetch.
            await #expect(throws: FalWebhookError.invalidSignature) { try await verifier.verify(headers: forged, body: Self.body) }
            #expect(fal.jwksFetches == 1)
            clock.advance(120)
            await #expect(throws: FalWebhookError.invalidSignature) { try await verifier.verify(headers: forged, body: Self.body) }
            #expect(fal.jwksFetches == 2)
        }
    }

    @Test func aRotatedKeyIsPickedUpByRefetching() async throws {
        try await withFakeFal { fal, http in
            let clock = TestClock()
            let verifier = Self.verifier(fal, http, clock: clock)
            func signed(_ id: String) -> [String: String] { fal.webhookHeaders(body: Self.body, requestID: id, timestamp: clock.now()) }
            try await verifier.verify(headers: signed("req-1"), body: Self.body)
            fal.rotateSigningKey()
            clock.advance(120)
            try await verifier.verify(headers: signed("req-2"), body: Self.body)
            #expect(fal.jwksFetches == 2)
            // After 24 h the cache is stale even for a key it knows.
            clock.advance(24 * 3600)
            try await verifier.verify(headers: signed("req-3"), body: Self.body)
            #expect(fal.jwksFetches == 3)
        }
    }

    @Test func unreachableKeysAreReportedAsSuch() async throws {
        let http = CurlHTTPClient()
        let fal = try await FakeFal.start()
        let headers = fal.webhookHeaders(body: Self.body, requestID: "req-1")
        let url = fal.jwksURL
        await fal.stop()
        let verifier = FalWebhookVerifier(http: http, jwksURL: url)
        let error = await #expect(throws: FalWebhookError.self) { try await verifier.verify(headers: headers, body: Self.body) }
        guard case .keysUnavailable = error else { Issue.record("got \(String(describing: error))"); return }
    }

    /// End to end: FakeFal posts the webhook to a receiver that verifies and decodes it.
    @Test func aDeliveredWebhookVerifiesAndCarriesTheResult() async throws {
        try await withFakeFal { fal, http in
            let verifier = FalWebhookVerifier(http: http, jwksURL: fal.jwksURL)
            let received = Mutex<[ProviderResult]>([])
            let router = Router()
            router.post("hooks/fal") { request, _ in
                let body = Data(try await request.body.collect(upTo: 1 << 20).readableBytesView)
                var headers: [String: String] = [:]
                for field in request.headers { headers[field.name.canonicalName] = field.value }
                do { try await verifier.verify(headers: headers, body: body) } catch { return Response(status: .unauthorized) }
                let result = try FalWebhookPayload.decode(body).tryOnResult(provider: "fal-fashn")
                received.withLock { $0.append(result) }
                return Response(status: .ok)
            }
            let receiver = try await FakeServer.start(router: router)
            defer { Task { await receiver.stop() } }
            fal.update { $0.latency = .milliseconds(50) }
            let provider = FashnProvider(key: fal.key, queueURL: fal.baseURL, http: http)
            let submission = try await provider.submit(Samples.request(webhook: "\(receiver.baseURL)/hooks/fal?render=r1"))
            let deadline = ContinuousClock.now + .seconds(10)
            // The fake notes the delivery once the receiver has answered.
            while fal.deliveries.isEmpty, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
            let result = try #require(received.withLock { $0.first })
            #expect(result.image == .url("\(fal.baseURL)/files/\(submission.jobID).jpg"))
            #expect(fal.deliveries.map(\.status) == [200])
            #expect(fal.deliveries.first?.url == "\(receiver.baseURL)/hooks/fal?render=r1")
            // fal redelivers the same signed outcome; a forged one is refused.
            #expect(await fal.postWebhook(requestID: submission.jobID, to: "\(receiver.baseURL)/hooks/fal") == 200)
            #expect(received.withLock { $0 } == [result, result])
            let forged = try await http.execute(.json(.post, url: "\(receiver.baseURL)/hooks/fal", body: fal.webhookBody(requestID: submission.jobID)))
            #expect(forged.status == 401)
        }
    }
}
