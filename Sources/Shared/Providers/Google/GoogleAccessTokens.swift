import Crypto
import FleetHTTPClient
import Foundation
import _CryptoExtras

/// Where the Vertex AI access token comes from.
public enum GoogleCredentials: Sendable {
    /// A service-account key: an RS256 JWT exchanged at the key's `token_uri`.
    case serviceAccount(GoogleServiceAccountKey)
    /// The GCE / Cloud Run / GKE metadata server (`host` may carry a port).
    case metadataServer(host: String)
    /// A token obtained elsewhere, used as is.
    case accessToken(String)

    public static let defaultMetadataHost = "metadata.google.internal"
}

/// The fields of a service-account key file the token exchange needs. The private key is parsed
/// once, when the key is loaded; it never appears in a message.
public struct GoogleServiceAccountKey: Sendable {
    public let clientEmail: String
    public let privateKeyID: String?
    public let tokenURI: String
    public let projectID: String?
    let privateKey: _RSA.Signing.PrivateKey

    public enum LoadError: Error, Equatable, CustomStringConvertible {
        case notAKeyFile(String)
        case badPrivateKey

        public var description: String {
            switch self {
            case .notAKeyFile(let reason): "not a service-account key file: \(reason)"
            case .badPrivateKey: "private_key is not a PEM RSA key of at least 2048 bits"
            }
        }
    }

    public init(json: Data) throws(LoadError) {
        struct File: Decodable {
            var type: String?
            var client_email: String
            var private_key: String
            var private_key_id: String?
            var token_uri: String?
            var project_id: String?
        }
        let file: File
        do { file = try JSONDecoder().decode(File.self, from: json) } catch {
            throw LoadError.notAKeyFile("expected JSON with client_email and private_key")
        }
        guard file.type == nil || file.type == "service_account" else { throw LoadError.notAKeyFile("type is not service_account") }
        do { privateKey = try _RSA.Signing.PrivateKey(pemRepresentation: file.private_key) } catch { throw LoadError.badPrivateKey }
        clientEmail = file.client_email
        privateKeyID = file.private_key_id
        tokenURI = file.token_uri ?? "https://oauth2.googleapis.com/token"
        projectID = file.project_id
    }

    /// The signed JWT of the OAuth 2.0 JWT-bearer grant (RFC 7523), valid for an hour.
    func assertion(scope: String, issuedAt: Date) throws(ProviderError) -> String {
        let iat = Int(issuedAt.timeIntervalSince1970)
        var header = ["alg": "RS256", "typ": "JWT"]
        header["kid"] = privateKeyID
        let claims: [String: any Sendable] = ["iss": clientEmail, "scope": scope, "aud": tokenURI, "iat": iat, "exp": iat + 3600]
        do {
            let signingInput = try Base64URL.encode(JSONSerialization.data(withJSONObject: header, options: .sortedKeys))
                + "." + Base64URL.encode(JSONSerialization.data(withJSONObject: claims, options: .sortedKeys))
            let signature = try privateKey.signature(for: Data(signingInput.utf8), padding: .insecurePKCS1v1_5)
            return signingInput + "." + Base64URL.encode(signature.rawRepresentation)
        } catch {
            throw ProviderError.unauthorized(provider: GoogleVirtualTryOnProvider.name, reason: "could not sign the service-account assertion")
        }
    }
}

/// A Vertex AI access token, fetched when needed and reused until shortly before it expires.
/// Concurrent callers share one fetch.
public actor GoogleAccessTokens {
    public static let scope = "https://www.googleapis.com/auth/cloud-platform"

    private struct Token {
        var value: String
        var expires: Date
    }

    private let credentials: GoogleCredentials
    private let http: any HTTPClient
    private let now: @Sendable () -> Date
    private let refreshMargin: TimeInterval
    private var cached: Token?
    private var fetching: Task<Token, any Error>?
    private var provider: String { GoogleVirtualTryOnProvider.name }

    /// `refreshMargin`: a token this close to expiry is replaced, so none expires in flight.
    public init(
        _ credentials: GoogleCredentials, http: any HTTPClient,
        refreshMargin: Duration = .seconds(60), now: @escaping @Sendable () -> Date = Date.init
    ) {
        self.credentials = credentials
        self.http = http
        self.now = now
        self.refreshMargin = refreshMargin.seconds
    }

    public func token() async throws(ProviderError) -> String {
        if case .accessToken(let token) = credentials { return token }
        if let cached, cached.expires.timeIntervalSince(now()) > refreshMargin { return cached.value }
        let task = fetching ?? Task { try await self.fetch() }
        fetching = task
        defer { fetching = nil }
        do {
            let token = try await task.value
            cached = token
            return token.value
        } catch let error as ProviderError {
            throw error
        } catch {
            throw ProviderError.unauthorized(provider: provider, reason: "\(error)")
        }
    }

    /// Drops the cached token (the API answered 401 with it).
    public func invalidate() {
        cached = nil
    }

    private func fetch() async throws(ProviderError) -> Token {
        let request: HTTPClientRequest
        switch credentials {
        case .accessToken(let token):
            return Token(value: token, expires: .distantFuture)
        case .serviceAccount(let key):
            let assertion = try key.assertion(scope: Self.scope, issuedAt: now())
            let form = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=\(assertion)"
            request = HTTPClientRequest(
                method: .post, url: key.tokenURI,
                headers: [("Content-Type", "application/x-www-form-urlencoded"), ("Accept", "application/json")],
                body: Data(form.utf8), timeout: .seconds(10))
        case .metadataServer(let host):
            request = HTTPClientRequest(
                url: "http://\(host)/computeMetadata/v1/instance/service-accounts/default/token",
                headers: [("Metadata-Flavor", "Google")], timeout: .seconds(5))
        }
        let issued = now()
        let response = try await http.send(request, provider: provider)
        guard response.isSuccess else {
            let reason = "token endpoint answered HTTP \(response.status): \(Self.oauthError(response.body))"
            throw HTTPStatus.isTransient(response.status)
                ? ProviderError.transient(provider: provider, reason: reason)
                : ProviderError.unauthorized(provider: provider, reason: reason)
        }
        struct Grant: Decodable {
            var access_token: String
            var expires_in: Int
        }
        let grant = try ProviderJSON.decode(Grant.self, from: response.body, what: "token response", provider: provider)
        return Token(value: grant.access_token, expires: issued.addingTimeInterval(TimeInterval(grant.expires_in)))
    }

    /// OAuth's `{"error":…,"error_description":…}`; never echoes the assertion.
    private static func oauthError(_ body: Data) -> String {
        struct OAuthError: Decodable {
            var error: String
            var error_description: String?
        }
        guard let error = try? JSONDecoder().decode(OAuthError.self, from: body) else { return ProviderText.excerpt(body) }
        return ProviderText.bounded([error.error, error.error_description].compactMap { $0 }.joined(separator: ": "))
    }
}

/// Base64url without padding (RFC 7515), as JWTs and JWKS use it.
enum Base64URL {
    static func encode(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Accepts padded and unpadded input, and standard base64's `+/`.
    static func decode(_ text: String) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            .replacingOccurrences(of: "=", with: "")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        return Data(base64Encoded: base64)
    }
}
