import Crypto
import Foundation

/// Checks that a webhook request really comes from Replicate (providers.md section 6, the
/// Standard Webhooks scheme): `webhook-id`, `webhook-timestamp` within ±300 s, and a
/// `webhook-signature` list of `v1,<base64>` entries, one of which must be
/// HMAC-SHA256(`whsec_` secret, `id.timestamp.body`).
public struct ReplicateWebhookVerifier: Sendable {
    public enum Header {
        public static let id = "webhook-id"
        public static let timestamp = "webhook-timestamp"
        public static let signature = "webhook-signature"
    }

    /// The secret's bytes (SymmetricKey is not Sendable; one is made per check).
    private let secret: Data
    private let tolerance: TimeInterval
    private let now: @Sendable () -> Date

    /// `secret`: `whsec_<base64>` as Replicate hands it out (GET /v1/webhooks/default/secret).
    public init(secret: String, tolerance: Duration = .seconds(300), now: @escaping @Sendable () -> Date = Date.init) throws(ReplicateWebhookError) {
        guard secret.hasPrefix("whsec_"), let bytes = Data(base64Encoded: String(secret.dropFirst(6))), !bytes.isEmpty else {
            throw ReplicateWebhookError.malformedSecret
        }
        self.secret = bytes
        self.tolerance = tolerance.seconds
        self.now = now
    }

    /// Returns the webhook id (the same on every redelivery) when the request is authentic.
    /// `headers` may use any letter case.
    public func verify(headers: [String: String], body: Data) throws(ReplicateWebhookError) -> String {
        let fields = WebhookHeaders(headers)
        let id = try fields.required(Header.id, or: ReplicateWebhookError.missingHeader)
        let timestamp = try fields.required(Header.timestamp, or: ReplicateWebhookError.missingHeader)
        let signatures = try fields.required(Header.signature, or: ReplicateWebhookError.missingHeader)
        switch WebhookHeaders.freshness(of: timestamp, now: now(), tolerance: tolerance) {
        case .fresh: break
        case .malformed: throw ReplicateWebhookError.malformedTimestamp
        case .stale(let skew): throw ReplicateWebhookError.staleTimestamp(skewSeconds: skew)
        }

        let signed = Data("\(id).\(timestamp).".utf8) + body
        let candidates = signatures.split(separator: " ").compactMap { entry -> Data? in
            guard entry.hasPrefix("v1,") else { return nil }
            return Data(base64Encoded: String(entry.dropFirst(3)))
        }
        let key = SymmetricKey(data: secret)
        // isValidAuthenticationCode compares in constant time.
        guard candidates.contains(where: { HMAC<SHA256>.isValidAuthenticationCode($0, authenticating: signed, using: key) }) else {
            throw ReplicateWebhookError.invalidSignature
        }
        return id
    }
}

/// Why a Replicate webhook request was refused; every case is the sender's fault.
public enum ReplicateWebhookError: Error, Equatable, CustomStringConvertible {
    case malformedSecret
    case missingHeader(String)
    case malformedTimestamp
    case staleTimestamp(skewSeconds: Int)
    case invalidSignature

    public var description: String {
        switch self {
        case .malformedSecret: "Replicate webhook secret is not whsec_<base64>"
        case .missingHeader(let name): "Replicate webhook: header \(name) missing"
        case .malformedTimestamp: "Replicate webhook: timestamp is not whole epoch seconds"
        case .staleTimestamp(let skew): "Replicate webhook: timestamp \(skew) s away from now"
        case .invalidSignature: "Replicate webhook: no v1 signature matches"
        }
    }
}
