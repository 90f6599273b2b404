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
        var lowered: [String: String] = [:]
        for (name, value) in headers { lowered[name.lowercased()] = value }
        func required(_ name: String) throws(ReplicateWebhookError) -> String {
            guard let value = lowered[name], !value.isEmpty else { throw ReplicateWebhookError.missingHeader(name) }
            return value
        }
        let id = try required(Header.id)
        let timestamp = try required(Header.timestamp)
        let signatures = try required(Header.signature)

        guard let seconds = Int(timestamp) else { throw ReplicateWebhookError.malformedTimestamp }
        let skew = now().timeIntervalSince1970 - TimeInterval(seconds)
        guard abs(skew) <= tolerance else { throw ReplicateWebhookError.staleTimestamp(skewSeconds: Int(skew)) }

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
