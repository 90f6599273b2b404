import FleetHTTPClient
import FleetSupport
import Foundation

/// `POST /webhooks/fal`: signed by fal (ED25519, `FalWebhookVerifier`), one event per request id.
public struct FalWebhookSource: WebhookSource {
    /// The source the fal models' `webhookSource` names.
    public static let name = "fal"
    public let provider = FalWebhookSource.name
    let verifier: FalWebhookVerifier

    public init(verifier: FalWebhookVerifier) { self.verifier = verifier }

    public func event(headers: [String: String], body: Data) async throws(WebhookRejection) -> ProviderEvent {
        do {
            try await verifier.verify(headers: headers, body: body)
        } catch {
            let status = switch error {
            case .missingHeader, .malformedTimestamp, .malformedSignature, .invalidSignature: 401
            case .staleTimestamp: 400
            case .keysUnavailable: 503  // fal delivers again; its keys will be back
            }
            throw WebhookRejection(status: status, reason: error.description)
        }
        guard let payload = try? FalWebhookPayload.decode(body) else {
            throw WebhookRejection(status: 400, reason: "fal webhook: body is not fal's webhook JSON")
        }
        return ProviderEvent(key: payload.requestID, announce: payload.requestID)
    }
}

extension FalWebhookSource {
    /// The fal models' webhook source (`TryOnProviderRegistration.webhookSources`): fal's keys
    /// from `FLEET_FAL_JWKS_URL` through `http`.
    @Sendable public static func sources(settings: WebhookSettings, http: any HTTPClient) -> [any WebhookSource] {
        [FalWebhookSource(verifier: FalWebhookVerifier(http: http, jwksURL: settings.falJWKSURL))]
    }
}

extension ProviderSettings {
    /// `FAL_KEY`, required by every fal model.
    func falKey(for provider: String) throws(ConfigurationError) -> String {
        guard let key = falKey else { throw ConfigurationError(variable: "FAL_KEY", reason: "required by provider \(provider)") }
        return key
    }
}
