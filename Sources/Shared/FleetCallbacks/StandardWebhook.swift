import Crypto
import FleetSupport
import Foundation

/// Signs and verifies requests the Standard Webhooks way (standardwebhooks.com, the scheme
/// Replicate uses): `webhook-id`, `webhook-timestamp` (epoch seconds) and `webhook-signature`,
/// a space-separated list of `v1,<base64 HMAC-SHA256 of "id.timestamp.body">`, one per secret.
/// Secrets are `whsec_<base64>`. Two secrets make a rotation: the fleet signs with both, a
/// receiver accepts either, so receivers move to the new secret one at a time.
public struct StandardWebhook: Sendable {
    public enum Header {
        public static let id = "webhook-id"
        public static let timestamp = "webhook-timestamp"
        public static let signature = "webhook-signature"
    }

    /// The secrets' bytes, the current one first (SymmetricKey is not Sendable; one is made per use).
    private let secrets: [Data]

    public init(secrets: [String]) throws(StandardWebhookError) {
        guard !secrets.isEmpty else { throw .noSecret }
        self.secrets = try secrets.map { text throws(StandardWebhookError) in try Self.decode(secret: text) }
    }

    /// The bytes of a `whsec_<base64>` secret.
    public static func decode(secret: String) throws(StandardWebhookError) -> Data {
        guard secret.hasPrefix("whsec_"), let bytes = Data(base64Encoded: String(secret.dropFirst(6))), bytes.count >= 16 else {
            throw .malformedSecret
        }
        return bytes
    }

    /// The three headers for one delivery attempt of `body` under the stable `id`.
    public func headers(id: String, timestamp: Date, body: Data) -> [(name: String, value: String)] {
        let seconds = String(Int(timestamp.timeIntervalSince1970))
        return [(Header.id, id), (Header.timestamp, seconds), (Header.signature, signature(id: id, timestamp: seconds, body: body))]
    }

    /// Whether one secret signs for both: two outbound kinds must never share one.
    func sharesSecret(with other: StandardWebhook) -> Bool { !Set(secrets).isDisjoint(with: other.secrets) }

    /// `v1,<base64>` for each secret, space-separated.
    public func signature(id: String, timestamp: String, body: Data) -> String {
        let signed = Data("\(id).\(timestamp).".utf8) + body
        return secrets.map { secret in
            "v1," + Data(HMAC<SHA256>.authenticationCode(for: signed, using: SymmetricKey(data: secret))).base64EncodedString()
        }.joined(separator: " ")
    }

    /// Returns the webhook id when one `v1` signature matches one of the secrets and the timestamp
    /// is within `tolerance` of `now`. `headers` may use any letter case.
    public func verify(
        headers: [String: String], body: Data, tolerance: Duration = .seconds(300), now: Date = Date()
    ) throws(StandardWebhookError) -> String {
        let fields = Dictionary(headers.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { _, last in last })
        guard let id = fields[Header.id] else { throw .missingHeader(Header.id) }
        guard let timestamp = fields[Header.timestamp] else { throw .missingHeader(Header.timestamp) }
        guard let signatures = fields[Header.signature] else { throw .missingHeader(Header.signature) }
        guard let seconds = Int(timestamp) else { throw .malformedTimestamp }
        let skew = Int(now.timeIntervalSince1970) - seconds
        guard Double(abs(skew)) <= tolerance.seconds else { throw .staleTimestamp(skewSeconds: skew) }
        let signed = Data("\(id).\(timestamp).".utf8) + body
        let candidates = signatures.split(separator: " ").compactMap { entry -> Data? in
            entry.hasPrefix("v1,") ? Data(base64Encoded: String(entry.dropFirst(3))) : nil
        }
        // isValidAuthenticationCode compares in constant time.
        let matches = secrets.contains { secret in
            candidates.contains { HMAC<SHA256>.isValidAuthenticationCode($0, authenticating: signed, using: SymmetricKey(data: secret)) }
        }
        guard matches else { throw .invalidSignature }
        return id
    }
}

public enum StandardWebhookError: Error, Equatable, CustomStringConvertible {
    case noSecret
    case malformedSecret
    case missingHeader(String)
    case malformedTimestamp
    case staleTimestamp(skewSeconds: Int)
    case invalidSignature

    public var description: String {
        switch self {
        case .noSecret: "no signing secret"
        case .malformedSecret: "a signing secret is not whsec_<base64> of at least 16 bytes"
        case .missingHeader(let name): "header \(name) missing"
        case .malformedTimestamp: "webhook-timestamp is not whole epoch seconds"
        case .staleTimestamp(let skew): "webhook-timestamp is \(skew) s away from now"
        case .invalidSignature: "no v1 signature matches"
        }
    }
}
