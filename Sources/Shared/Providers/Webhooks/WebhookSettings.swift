import FleetSupport

/// The dispatcher's provider webhooks (`POST /webhooks/{source}` on `FLEET_HTTP_ADDRESS`), read from
/// the environment; `docs/configuration.md` lists each variable.
public struct WebhookSettings: Sendable {
    /// fal's key set (JWKS) that webhook signatures are checked against.
    public var falJWKSURL: String
    /// Largest body accepted; larger requests get 413.
    public var maxBodyBytes: Int

    public init(falJWKSURL: String = FalWebhookVerifier.defaultJWKSURL, maxBodyBytes: Int = 8 << 20) {
        self.falJWKSURL = falJWKSURL
        self.maxBodyBytes = maxBodyBytes
    }

    public static func load(from environment: [String: String]) throws -> WebhookSettings {
        let reader = EnvironmentReader(environment: environment)
        let jwks = environment["FLEET_FAL_JWKS_URL"].flatMap { $0.isEmpty ? nil : $0 } ?? FalWebhookVerifier.defaultJWKSURL
        guard jwks.hasPrefix("https://") || jwks.hasPrefix("http://") else {
            throw ConfigurationError(variable: "FLEET_FAL_JWKS_URL", reason: "'\(jwks)' is not an http(s) URL")
        }
        return WebhookSettings(
            falJWKSURL: jwks, maxBodyBytes: try reader.integer("FLEET_WEBHOOK_MAX_BYTES", default: 8 << 20, range: 1024...(64 << 20)))
    }
}
