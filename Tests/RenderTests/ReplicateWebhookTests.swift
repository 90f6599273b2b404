import Crypto
import FakeProviders
import Foundation
@testable import Renders
import Testing

/// Replicate's webhook signatures (Standard Webhooks): ReplicateWebhookVerifier against the
/// scheme as providers.md writes it, computed here independently of the fake.
@Suite struct ReplicateWebhookTests {
    static let body = Data(#"{"id":"pred-1","status":"succeeded","output":"https://replicate.delivery/x.png"}"#.utf8)
    static let keyBytes = Data((0..<32).map { UInt8($0 * 7 % 256) })
    static let secret = "whsec_" + keyBytes.base64EncodedString()

    static func signature(id: String, timestamp: String, body: Data, key: Data = keyBytes) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: Data("\(id).\(timestamp).".utf8) + body, using: SymmetricKey(data: key))
        return Data(mac).base64EncodedString()
    }

    @Test func anyV1EntryOfTheListMayMatchAndHeaderCaseDoesNotMatter() throws {
        let verifier = try ReplicateWebhookVerifier(secret: Self.secret)
        let timestamp = String(Int(Date().timeIntervalSince1970))
        let good = Self.signature(id: "msg_1", timestamp: timestamp, body: Self.body)
        let other = Self.signature(id: "msg_1", timestamp: timestamp, body: Self.body, key: Data(repeating: 1, count: 32))
        let headers = ["Webhook-Id": "msg_1", "WEBHOOK-TIMESTAMP": timestamp, "webhook-signature": "v1,\(other) v2,\(good) v1,\(good)"]
        #expect(try verifier.verify(headers: headers, body: Self.body) == "msg_1")
        // The fake signs the same way.
        #expect(FakeReplicate.webhookHeaders(body: Self.body, webhookID: "msg_1", secret: Self.secret)["webhook-signature"] == "v1,\(good)")
    }

    @Test func onlyAV1EntryCountsAndEveryPartIsSigned() throws {
        let verifier = try ReplicateWebhookVerifier(secret: Self.secret)
        let timestamp = String(Int(Date().timeIntervalSince1970))
        let good = Self.signature(id: "msg_1", timestamp: timestamp, body: Self.body)
        func verify(_ id: String, _ time: String, _ signature: String) throws(ReplicateWebhookError) {
            _ = try verifier.verify(headers: ["webhook-id": id, "webhook-timestamp": time, "webhook-signature": signature], body: Self.body)
        }
        #expect(throws: ReplicateWebhookError.invalidSignature) { try verify("msg_1", timestamp, "v2,\(good)") }
        #expect(throws: ReplicateWebhookError.invalidSignature) { try verify("msg_2", timestamp, "v1,\(good)") }
        #expect(throws: ReplicateWebhookError.invalidSignature) { try verify("msg_1", String(Int(timestamp)! - 1), "v1,\(good)") }
        #expect(throws: ReplicateWebhookError.malformedTimestamp) { try verify("msg_1", "soon", "v1,\(good)") }
        #expect(throws: ReplicateWebhookError.missingHeader("webhook-signature")) { try verify("msg_1", timestamp, "") }
    }

    @Test func theTimestampMustBeWithinFiveMinutes() throws {
        let now = Date(timeIntervalSince1970: 1_800_000_000)  // whole seconds: the skew is exact
        let verifier = try ReplicateWebhookVerifier(secret: Self.secret, now: { now })
        for (offset, fresh) in [(-299, true), (299, true), (-301, false), (301, false)] {
            let timestamp = String(Int(now.timeIntervalSince1970) + offset)
            let headers = ["webhook-id": "m", "webhook-timestamp": timestamp,
                           "webhook-signature": "v1," + Self.signature(id: "m", timestamp: timestamp, body: Self.body)]
            if fresh {
                #expect(try verifier.verify(headers: headers, body: Self.body) == "m")
            } else {
                #expect(throws: ReplicateWebhookError.staleTimestamp(skewSeconds: -offset)) { try verifier.verify(headers: headers, body: Self.body) }
            }
        }
    }

    @Test func aSecretMustBeWhsecBase64() {
        for bad in ["", "whsec_", "whsec_!!!", "sk_" + Self.keyBytes.base64EncodedString()] {
            #expect(throws: ReplicateWebhookError.malformedSecret) { try ReplicateWebhookVerifier(secret: bad) }
        }
    }
}
