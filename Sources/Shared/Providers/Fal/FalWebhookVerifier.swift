import CSodium
import Crypto
import FleetHTTPClient
import Foundation

/// Checks that a webhook request really comes from fal (docs/providers.md, section 2): four
/// headers, a timestamp within ±300 s, and an Ed25519 signature over
/// `request-id \n user-id \n timestamp \n sha256hex(raw body)` by any key of fal's JWKS.
///
/// The key set is cached (never longer than 24 h: fal rotates keys). When no cached key
/// verifies, it is fetched again once, unless it was fetched within `minimumRefetchInterval`
/// (so forged requests cannot make the dispatcher hammer fal's key endpoint).
public actor FalWebhookVerifier {
    public static let defaultJWKSURL = "https://rest.alpha.fal.ai/.well-known/jwks.json"

    public enum Header {
        public static let requestID = "x-fal-webhook-request-id"
        public static let userID = "x-fal-webhook-user-id"
        public static let timestamp = "x-fal-webhook-timestamp"
        public static let signature = "x-fal-webhook-signature"
    }

    private struct KeySet {
        var keys: [[UInt8]]
        var fetched: Date
    }

    private let http: any HTTPClient
    private let jwksURL: String
    private let cacheLifetime: TimeInterval
    private let minimumRefetchInterval: TimeInterval
    private let tolerance: TimeInterval
    private let now: @Sendable () -> Date
    private var keySet: KeySet?
    /// A fetch in progress, shared by webhooks that arrive meanwhile.
    private var fetching: Task<KeySet, any Error>?

    public init(
        http: any HTTPClient, jwksURL: String = FalWebhookVerifier.defaultJWKSURL,
        cacheLifetime: Duration = .seconds(24 * 3600), minimumRefetchInterval: Duration = .seconds(60),
        tolerance: Duration = .seconds(300), now: @escaping @Sendable () -> Date = Date.init
    ) {
        precondition(sodium_init() >= 0, "libsodium failed to initialise")
        self.http = http
        self.jwksURL = jwksURL
        self.cacheLifetime = min(cacheLifetime.seconds, 24 * 3600)
        self.minimumRefetchInterval = minimumRefetchInterval.seconds
        self.tolerance = tolerance.seconds
        self.now = now
    }

    /// Returns normally when the request is authentic. `headers` may use any letter case.
    public func verify(headers: [String: String], body: Data) async throws(FalWebhookError) {
        let fields = WebhookHeaders(headers)
        let requestID = try fields.required(Header.requestID, or: FalWebhookError.missingHeader)
        let userID = try fields.required(Header.userID, or: FalWebhookError.missingHeader)
        let timestamp = try fields.required(Header.timestamp, or: FalWebhookError.missingHeader)
        let signatureHex = try fields.required(Header.signature, or: FalWebhookError.missingHeader)
        switch WebhookHeaders.freshness(of: timestamp, now: now(), tolerance: tolerance) {
        case .fresh: break
        case .malformed: throw FalWebhookError.malformedTimestamp
        case .stale(let skew): throw FalWebhookError.staleTimestamp(skewSeconds: skew)
        }
        guard let signature = Self.hexBytes(signatureHex), signature.count == Int(crypto_sign_BYTES) else {
            throw FalWebhookError.malformedSignature
        }
        let digest = SHA256.hash(data: body).hexString
        let message = Array("\(requestID)\n\(userID)\n\(timestamp)\n\(digest)".utf8)

        if let cached = keySet, now().timeIntervalSince(cached.fetched) < cacheLifetime {
            if Self.anyKeyVerifies(cached.keys, signature: signature, message: message) { return }
            guard now().timeIntervalSince(cached.fetched) >= minimumRefetchInterval else { throw FalWebhookError.invalidSignature }
        }
        let fresh = try await fetchKeys()
        guard Self.anyKeyVerifies(fresh.keys, signature: signature, message: message) else { throw FalWebhookError.invalidSignature }
    }

    private func fetchKeys() async throws(FalWebhookError) -> KeySet {
        let task = fetching ?? Task { try await self.download() }
        fetching = task
        defer { fetching = nil }
        do {
            let set = try await task.value
            keySet = set
            return set
        } catch let error as FalWebhookError {
            throw error
        } catch {
            throw FalWebhookError.keysUnavailable("\(error)")
        }
    }

    private func download() async throws(FalWebhookError) -> KeySet {
        let response: HTTPClientResponse
        do {
            response = try await http.execute(HTTPClientRequest(url: jwksURL, headers: [("Accept", "application/json")], timeout: .seconds(10)))
        } catch {
            throw FalWebhookError.keysUnavailable("\(error)")
        }
        guard response.isSuccess else { throw FalWebhookError.keysUnavailable("JWKS endpoint answered HTTP \(response.status)") }
        struct JWKS: Decodable {
            struct Key: Decodable { var x: String? }
            var keys: [Key]
        }
        guard let jwks = try? JSONDecoder().decode(JWKS.self, from: response.body) else {
            throw FalWebhookError.keysUnavailable("JWKS is not {\"keys\":[…]}")
        }
        let keys = jwks.keys.compactMap { $0.x.flatMap(Base64URL.decode) }.map(Array.init).filter { $0.count == Int(crypto_sign_PUBLICKEYBYTES) }
        guard !keys.isEmpty else { throw FalWebhookError.keysUnavailable("JWKS holds no Ed25519 key") }
        return KeySet(keys: keys, fetched: now())
    }

    private static func anyKeyVerifies(_ keys: [[UInt8]], signature: [UInt8], message: [UInt8]) -> Bool {
        keys.contains { key in crypto_sign_verify_detached(signature, message, UInt64(message.count), key) == 0 }
    }

    private static func hexBytes(_ text: String) -> [UInt8]? {
        let digits = Array(text.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let high = hexValue(digits[index]), let low = hexValue(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        return bytes
    }

    private static func hexValue(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

/// Why a webhook request was refused. `keysUnavailable` is fal's or the network's fault: answer
/// 5xx so fal delivers again; every other case is a bad request.
public enum FalWebhookError: Error, Equatable, CustomStringConvertible {
    case missingHeader(String)
    case malformedTimestamp
    case staleTimestamp(skewSeconds: Int)
    case malformedSignature
    case invalidSignature
    case keysUnavailable(String)

    public var description: String {
        switch self {
        case .missingHeader(let name): "fal webhook: header \(name) missing"
        case .malformedTimestamp: "fal webhook: timestamp is not whole epoch seconds"
        case .staleTimestamp(let skew): "fal webhook: timestamp \(skew) s away from now (limit 300 s)"
        case .malformedSignature: "fal webhook: signature is not 128 hex digits"
        case .invalidSignature: "fal webhook: signature does not verify with any fal key"
        case .keysUnavailable(let reason): "fal webhook: cannot get fal's keys: \(reason)"
        }
    }
}
