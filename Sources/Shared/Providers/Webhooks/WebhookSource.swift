import Foundation

/// One provider's webhook: authenticates a request and names the event it carries. The
/// dispatcher serves each of `TryOnProviders.webhookSources` (`WebhookRoutes`); the providers
/// whose `webhookSource` names it read the stored events (`TryOnProvider.result(ofCallback:)`).
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

    public init(status: Int, reason: String) { (self.status, self.reason) = (status, reason) }

    public var description: String { "\(status): \(reason)" }
}
