import FleetHTTPClient
import FleetSupport
import Foundation

/// Vertex AI Virtual Try-On (`virtual-try-on-001`): one synchronous `:predict` POST. `submit`
/// makes the call and returns the outcome inside the submission; `result` hands it back.
///
/// Google documents tops, bottoms and footwear; dresses and outerwear are single garments the
/// model dresses the same way, so every category is declared (the server-side category setting
/// can still withhold one).
public struct GoogleVirtualTryOnProvider: TryOnProvider {
    public static let name = "google-vto"

    /// Where `:predict` lives.
    public struct Endpoint: Sendable, Equatable {
        public var project: String
        public var location: String
        public var model: String
        /// `https://{location}-aiplatform.googleapis.com` unless overridden (tests).
        public var baseURL: String

        public init(project: String, location: String = "us-central1", model: String = "virtual-try-on-001", baseURL: String? = nil) {
            self.project = project
            self.location = location
            self.model = model
            self.baseURL = baseURL ?? "https://\(location)-aiplatform.googleapis.com"
        }

        var predictURL: String {
            "\(baseURL)/v1/projects/\(project)/locations/\(location)/publishers/google/models/\(model):predict"
        }
    }

    public let endpoint: Endpoint
    public let tokens: GoogleAccessTokens
    private let http: any HTTPClient
    public var name: String { Self.name }
    public static let categories = Set(GarmentCategory.allCases)
    public var supportedCategories: Set<GarmentCategory> { Self.categories }

    public init(endpoint: Endpoint, tokens: GoogleAccessTokens, http: any HTTPClient) {
        self.endpoint = endpoint
        self.tokens = tokens
        self.http = http
    }

    public func submit(_ request: TryOnRequest) async throws(ProviderError) -> ProviderSubmission {
        guard supportedCategories.contains(request.category) else {
            throw ProviderError.unsupportedCategory(provider: name, request.category)
        }
        let body: Data
        do { body = try JSONEncoder().encode(PredictRequest(request)) } catch {
            throw ProviderError.failed(provider: name, reason: "could not encode the request: \(error)")
        }
        let token = try await tokens.token()
        let response = try await http.send(
            .json(.post, url: endpoint.predictURL, body: body, headers: [("Authorization", "Bearer \(token)")], timeout: request.options.timeout),
            provider: name)
        guard response.isSuccess else {
            if response.status == 401 { await tokens.invalidate() }
            throw ProviderError.from(status: response.status, message: Self.errorMessage(response.body), provider: name, headers: response.headers)
        }
        let predictions = try ProviderJSON.decode(PredictResponse.self, from: response.body, what: "predict response", provider: name)
        return ProviderSubmission(provider: name, jobID: "vto-\(UUID().uuidString.lowercased())", state: .settled(try outcome(predictions)))
    }

    public func result(of submission: ProviderSubmission) async throws(ProviderError) -> ProviderResult {
        guard case .settled(let result) = submission.state else {
            throw ProviderError.malformedResponse(provider: name, reason: "submission \(submission.jobID) is not a Google one")
        }
        return result
    }

    /// A synchronous call cannot be cancelled once made.
    public func cancel(_ submission: ProviderSubmission) async {}

    private func outcome(_ response: PredictResponse) throws(ProviderError) -> ProviderResult {
        let predictions = response.predictions ?? []
        if let image = predictions.first(where: { $0.bytesBase64Encoded != nil }), let encoded = image.bytesBase64Encoded {
            guard let bytes = Data(base64Encoded: encoded), !bytes.isEmpty else {
                throw ProviderError.malformedResponse(provider: name, reason: "bytesBase64Encoded is not base64")
            }
            return .succeeded(.bytes(bytes, mimeType: image.mimeType ?? "image/png"))
        }
        // Every image withheld by the Responsible-AI filter (or none generated): a verdict on
        // this input, not worth repeating.
        let reason = predictions.compactMap(\.raiFilteredReason).first
        return .failed(ProviderFailure(
            code: reason == nil ? "no_image" : "rai_filtered",
            message: reason.map { ProviderText.bounded($0) } ?? "the model returned no image", retryable: false))
    }

    /// Google's `{"error":{"code":…,"message":…,"status":…}}`.
    private static func errorMessage(_ body: Data) -> String {
        struct Body: Decodable {
            struct Error: Decodable {
                var message: String?
                var status: String?
            }
            var error: Error
        }
        guard let error = try? JSONDecoder().decode(Body.self, from: body).error else { return ProviderText.excerpt(body) }
        return [error.status, error.message].compactMap { $0 }.joined(separator: ": ")
    }

    struct PredictRequest: Encodable {
        struct Image: Encodable {
            struct Bytes: Encodable {
                var bytesBase64Encoded: String
                var mimeType: String
            }
            var image: Bytes
            init(_ image: TryOnImage) { self.image = Bytes(bytesBase64Encoded: image.bytes.base64EncodedString(), mimeType: image.mimeType) }
        }
        struct Instance: Encodable {
            var personImage: Image
            var productImages: [Image]
        }
        struct Parameters: Encodable {
            var sampleCount = 1
            var seed: Int?
            /// A seed requires the watermark off; otherwise Google's default (on).
            var addWatermark: Bool?
            var outputOptions = OutputOptions()
        }
        struct OutputOptions: Encodable {
            var mimeType = "image/jpeg"
            var compressionQuality = 90
        }
        var instances: [Instance]
        var parameters: Parameters

        init(_ request: TryOnRequest) {
            instances = [Instance(personImage: Image(request.person), productImages: [Image(request.garment)])]
            parameters = Parameters(seed: request.options.seed, addWatermark: request.options.seed == nil ? nil : false)
        }
    }

    struct PredictResponse: Decodable {
        struct Prediction: Decodable {
            var bytesBase64Encoded: String?
            var mimeType: String?
            var raiFilteredReason: String?
        }
        var predictions: [Prediction]?
    }
}

extension GoogleVirtualTryOnProvider {
    /// Vertex AI's predict, synchronous: a project and credentials; Google's quota is a rate
    /// (`RenderCapacity`).
    public static let registration = TryOnProviderRegistration(
        name: name, categories: categories,
        defaultLimit: ProviderLimit(maxRunning: 20, rate: 50, rateWindow: .seconds(60)),
        make: { settings, http throws(ConfigurationError) in try make(settings, http: http) })

    /// Credentials in Google's own order: a given token, a key file, else the metadata server.
    static func make(_ settings: ProviderSettings, http: any HTTPClient) throws(ConfigurationError) -> GoogleVirtualTryOnProvider {
        let credentials: GoogleCredentials
        var keyProject: String?
        if let token = settings.googleAccessToken {
            credentials = .accessToken(token)
        } else if let path = settings.googleCredentialsFile {
            let key: GoogleServiceAccountKey
            do {
                key = try GoogleServiceAccountKey(json: try Data(contentsOf: URL(fileURLWithPath: path)))
            } catch let error as GoogleServiceAccountKey.LoadError {
                throw ConfigurationError(variable: "GOOGLE_APPLICATION_CREDENTIALS", reason: error.description)
            } catch {
                throw ConfigurationError(variable: "GOOGLE_APPLICATION_CREDENTIALS", reason: "cannot read \(path)")
            }
            credentials = .serviceAccount(key)
            keyProject = key.projectID
        } else {
            credentials = .metadataServer(host: settings.metadataHost)
        }
        guard let project = settings.googleProject ?? keyProject else {
            throw ConfigurationError(variable: "GOOGLE_CLOUD_PROJECT", reason: "required by provider \(GoogleVirtualTryOnProvider.name)")
        }
        let endpoint = Endpoint(project: project, location: settings.googleLocation, model: settings.googleModel, baseURL: settings.googleEndpoint)
        return GoogleVirtualTryOnProvider(endpoint: endpoint, tokens: GoogleAccessTokens(credentials, http: http), http: http)
    }
}
