import Crypto
import Foundation
import Hummingbird
import Synchronization
import _CryptoExtras

/// Vertex AI Virtual Try-On on loopback (docs/providers.md, section 3): `:predict` with the
/// real request and response JSON, an OAuth token endpoint that checks the service-account JWT's
/// RS256 signature, and a GCE metadata-server token endpoint.
public final class FakeGoogleVTO: Sendable {
    public struct Behavior: Sendable {
        public var latency: Duration = .milliseconds(20)
        /// The next N predicts answer 503 `UNAVAILABLE`.
        public var transientFailures = 0
        /// Predicts answer 400 `INVALID_ARGUMENT` with this message.
        public var rejection: String?
        /// Every image is withheld by the Responsible-AI filter.
        public var raiFiltered = false
        /// Predicts answer 200 with this garbage instead of their JSON.
        public var malformed: Garbage?
        /// `expires_in` of the tokens handed out.
        public var tokenLifetimeSeconds = 3599
        public var resultImage = FakeImages.jpeg

        public init() {}
    }

    public let project = "fake-project"
    public let clientEmail = "renderer@fake-project.iam.gserviceaccount.com"
    /// Accepted by `:predict` as is (the `accessToken` credential).
    public let staticToken = "fake-static-token"
    private let server: FakeServer
    private let state = Mutex(State())

    /// One key for every fake in the process: RSA generation is slow in debug builds.
    private static let signingKey: _RSA.Signing.PrivateKey = {
        do { return try _RSA.Signing.PrivateKey(keySize: .bits2048) } catch { fatalError("RSA key generation failed: \(error)") }
    }()

    private struct State {
        var behavior = Behavior()
        var issuedTokens: Set<String> = []
        var tokenGrants = 0
        var metadataGrants = 0
        var predicts: [RecordedRequest] = []
    }

    public var baseURL: String { server.baseURL }
    public var tokenURL: String { "\(server.baseURL)/token" }
    /// `host:port`, for `GoogleCredentials.metadataServer`.
    public var metadataHost: String { "127.0.0.1:\(server.port)" }

    /// A service-account key file whose `token_uri` is this fake.
    public var serviceAccountKeyJSON: Data {
        let key: [String: String] = [
            "type": "service_account", "project_id": project, "private_key_id": "fake-key-1",
            "private_key": Self.signingKey.pkcs8PEMRepresentation, "client_email": clientEmail,
            "client_id": "100000000000000000001", "token_uri": tokenURL,
        ]
        return (try? JSONSerialization.data(withJSONObject: key, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data()
    }

    public static func start() async throws -> FakeGoogleVTO {
        let router = Router()
        let fake = Late<FakeGoogleVTO>()
        router.post("token") { request, _ in try await fake.value.token(request) }
        router.get("computeMetadata/v1/instance/service-accounts/default/token") { request, _ in fake.value.metadataToken(request) }
        router.post("**") { request, _ in try await fake.value.predict(request) }
        _ = signingKey
        return fake.set(FakeGoogleVTO(server: try await FakeServer.start(router: router)))
    }

    private init(server: FakeServer) {
        self.server = server
    }

    public func stop() async { await server.stop() }

    public func update(_ change: (inout Behavior) -> Void) { state.withLock { change(&$0.behavior) } }
    /// Tokens granted for a service-account JWT.
    public var tokenGrants: Int { state.withLock { $0.tokenGrants } }
    public var metadataGrants: Int { state.withLock { $0.metadataGrants } }
    public var predictRequests: [RecordedRequest] { state.withLock { $0.predicts } }

    // MARK: Token endpoints

    private func token(_ request: Request) async throws -> Response {
        let form = Self.formFields(String(decoding: try await FakeHTTP.body(request), as: UTF8.self))
        guard form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer", let assertion = form["assertion"] else {
            return FakeHTTP.json(400, ["error": "unsupported_grant_type", "error_description": "Invalid grant_type"])
        }
        if let problem = checkAssertion(assertion) {
            return FakeHTTP.json(400, ["error": "invalid_grant", "error_description": problem])
        }
        return grant { $0.tokenGrants += 1 }
    }

    private func metadataToken(_ request: Request) -> Response {
        guard request.headers[.init("Metadata-Flavor")!] == "Google" else {
            return FakeHTTP.bytes(403, Data("Missing required header: Metadata-Flavor".utf8), contentType: "text/html")
        }
        return grant { $0.metadataGrants += 1 }
    }

    private func grant(_ count: (inout State) -> Void) -> Response {
        let (token, lifetime) = state.withLock { state in
            count(&state)
            let token = "ya29.fake-\(UUID().uuidString.lowercased())"
            state.issuedTokens.insert(token)
            return (token, state.behavior.tokenLifetimeSeconds)
        }
        return FakeHTTP.json(200, ["access_token": token, "expires_in": lifetime, "token_type": "Bearer"])
    }

    /// What Google checks of a JWT-bearer assertion; nil when it is good.
    private func checkAssertion(_ jwt: String) -> String? {
        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 3, let headerData = Self.base64URL(parts[0]), let claimsData = Self.base64URL(parts[1]),
              let signature = Self.base64URL(parts[2]),
              let header = (try? JSONSerialization.jsonObject(with: headerData)) as? [String: Any],
              let claims = (try? JSONSerialization.jsonObject(with: claimsData)) as? [String: Any]
        else { return "Invalid JWT: not three base64url JSON parts" }
        guard header["alg"] as? String == "RS256" else { return "Invalid JWT: alg must be RS256" }
        let signed = Data("\(parts[0]).\(parts[1])".utf8)
        guard Self.signingKey.publicKey.isValidSignature(.init(rawRepresentation: signature), for: signed, padding: .insecurePKCS1v1_5) else {
            return "Invalid JWT Signature."
        }
        let now = Int(Date().timeIntervalSince1970)
        guard claims["iss"] as? String == clientEmail else { return "Invalid issuer" }
        guard claims["aud"] as? String == tokenURL else { return "Invalid JWT: aud must be the token URL" }
        guard let scope = claims["scope"] as? String, scope.split(separator: " ").contains("https://www.googleapis.com/auth/cloud-platform") else {
            return "Invalid JWT: scope must include cloud-platform"
        }
        guard let iat = claims["iat"] as? Int, let exp = claims["exp"] as? Int, abs(iat - now) <= 300, exp > now, exp - iat <= 3600 else {
            return "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe."
        }
        return nil
    }

    // MARK: Predict

    private func predict(_ request: Request) async throws -> Response {
        let body = try await FakeHTTP.body(request)
        let recorded = FakeHTTP.record(request, body: body)
        state.withLock { $0.predicts.append(recorded) }
        let path = recorded.path
        guard path == "/v1/projects/\(project)/locations/us-central1/publishers/google/models/virtual-try-on-001:predict" else {
            return Self.error(404, "NOT_FOUND", "Publisher model \(path) was not found.")
        }
        let bearer = recorded.headers["authorization"].flatMap { $0.hasPrefix("Bearer ") ? String($0.dropFirst(7)) : nil }
        let (known, behavior) = state.withLock { state in
            let behavior = state.behavior
            if behavior.transientFailures > 0 { state.behavior.transientFailures -= 1 }
            return (bearer.map { $0 == staticToken || state.issuedTokens.contains($0) } ?? false, behavior)
        }
        guard known else {
            return Self.error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials. Expected OAuth 2 access token.")
        }
        try await FakeServer.pause(for: behavior.latency)
        if behavior.transientFailures > 0 { return Self.error(503, "UNAVAILABLE", "The service is currently unavailable.") }
        if let rejection = behavior.rejection { return Self.error(400, "INVALID_ARGUMENT", rejection) }
        let parameters: Parameters
        switch Self.parameters(body) {
        case .success(let parsed): parameters = parsed
        case .failure(let problem): return Self.error(400, "INVALID_ARGUMENT", problem.message)
        }
        let prediction: [String: Any] = behavior.raiFiltered
            ? ["raiFilteredReason": "Your current safety filter threshold filtered out the generated image. (support code 58061214)"]
            : ["mimeType": parameters.mimeType, "bytesBase64Encoded": behavior.resultImage.base64EncodedString()]
        let answer = ["predictions": Array(repeating: prediction, count: parameters.sampleCount)]
        return behavior.malformed.map { $0.response(answer) } ?? FakeHTTP.json(200, answer)
    }

    private struct Parameters {
        var sampleCount: Int
        var mimeType: String
    }

    private struct Problem: Error { var message: String }

    /// The checks Vertex makes of a `virtual-try-on-001` request body.
    private static func parameters(_ body: Data) -> Result<Parameters, Problem> {
        guard let object = (try? JSONSerialization.jsonObject(with: body)) as? [String: Any],
              let instances = object["instances"] as? [[String: Any]] else {
            return .failure(Problem(message: "Invalid JSON payload: instances is required"))
        }
        guard instances.count == 1 else { return .failure(Problem(message: "Exactly one instance is supported")) }
        func imageBytes(_ value: Any?) -> Data? {
            guard let image = (value as? [String: Any])?["image"] as? [String: Any],
                  let encoded = image["bytesBase64Encoded"] as? String else { return nil }
            return Data(base64Encoded: encoded).flatMap { $0.isEmpty ? nil : $0 }
        }
        guard imageBytes(instances[0]["personImage"]) != nil else {
            return .failure(Problem(message: "personImage.image.bytesBase64Encoded must be base64 image bytes"))
        }
        guard let products = instances[0]["productImages"] as? [Any], (1...3).contains(products.count),
              products.allSatisfy({ imageBytes($0) != nil }) else {
            return .failure(Problem(message: "productImages must hold 1 to 3 images with bytesBase64Encoded"))
        }
        let parameters = object["parameters"] as? [String: Any] ?? [:]
        let sampleCount = parameters["sampleCount"] as? Int ?? 1
        guard (1...4).contains(sampleCount) else { return .failure(Problem(message: "sampleCount must be between 1 and 4")) }
        if parameters["seed"] != nil, parameters["addWatermark"] as? Bool != false {
            return .failure(Problem(message: "Seed is not supported when addWatermark is enabled."))
        }
        let output = parameters["outputOptions"] as? [String: Any]
        let mimeType = output?["mimeType"] as? String ?? "image/png"
        guard ["image/png", "image/jpeg"].contains(mimeType) else { return .failure(Problem(message: "Unsupported outputOptions.mimeType")) }
        return .success(Parameters(sampleCount: sampleCount, mimeType: mimeType))
    }

    private static func error(_ code: Int, _ status: String, _ message: String) -> Response {
        FakeHTTP.json(code, ["error": ["code": code, "message": message, "status": status]])
    }

    private static func formFields(_ body: String) -> [String: String] {
        var fields: [String: String] = [:]
        for pair in body.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1).map { String($0).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? "" }
            if parts.count == 2 { fields[parts[0]] = parts[1] }
        }
        return fields
    }

    private static func base64URL(_ text: String) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        return Data(base64Encoded: base64)
    }
}
