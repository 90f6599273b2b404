import Foundation
import Renders

/// One provider's webhook: authenticates a request and names the event it carries.
public protocol WebhookSource: Sendable {
    /// The path segment (`/webhooks/{provider}`) and the `provider_events.provider` value.
    var provider: String { get }
    func event(headers: [String: String], body: Data) async throws(WebhookRejection) -> ProviderEvent
}

/// What a verified webhook is stored and announced as.
public struct ProviderEvent: Sendable, Equatable {
    /// Stored once per key: a redelivery with the same key is acknowledged, not applied again.
    public let key: String
    /// Announced on `fleet_render_events`: the provider's job id its waiter knows.
    public let announce: String
}

/// A refused webhook: the HTTP status tells the provider whether to deliver again (5xx) or not.
public struct WebhookRejection: Error, Equatable, CustomStringConvertible {
    public let status: Int
    public let reason: String

    public var description: String { "\(status): \(reason)" }
}

/// `POST /webhooks/fal`: signed by fal (ED25519, `FalWebhookVerifier`), one event per request id.
public struct FalWebhookSource: WebhookSource {
    public let provider = "fal"
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
