import FleetSupport

/// The dispatcher's provider webhooks (`POST /webhooks/fal`, `POST /webhooks/replicate` on
/// `FLEET_HTTP_ADDRESS`), read from the environment; `docs/configuration.md` lists each variable.
public struct WebhookSettings: Sendable {
    /// fal's key set (JWKS) that webhook signatures are checked against.
    public var falJWKSURL: String
    /// Replicate's verifier, from `whsec_…`; nil when unset: the endpoint then refuses with 503.
    public var replicate: ReplicateWebhookVerifier?
    /// Largest body accepted; larger requests get 413. Replicate repeats the prediction's input
    /// (data URIs of whole images) in every webhook, hence megabytes.
    public var maxBodyBytes: Int

    public init(falJWKSURL: String = FalWebhookVerifier.defaultJWKSURL, replicate: ReplicateWebhookVerifier? = nil, maxBodyBytes: Int = 8 << 20) {
        self.falJWKSURL = falJWKSURL
        self.replicate = replicate
        self.maxBodyBytes = maxBodyBytes
    }

    public static func load(from environment: [String: String]) throws -> WebhookSettings {
        let reader = EnvironmentReader(environment: environment)
        var replicate: ReplicateWebhookVerifier?
        if let secret = environment["FLEET_REPLICATE_WEBHOOK_SECRET"], !secret.isEmpty {
            do {
                replicate = try ReplicateWebhookVerifier(secret: secret)
            } catch {
                throw ConfigurationError(variable: "FLEET_REPLICATE_WEBHOOK_SECRET", reason: "not whsec_ followed by base64")
            }
        }
        let jwks = environment["FLEET_FAL_JWKS_URL"].flatMap { $0.isEmpty ? nil : $0 } ?? FalWebhookVerifier.defaultJWKSURL
        guard jwks.hasPrefix("https://") || jwks.hasPrefix("http://") else {
            throw ConfigurationError(variable: "FLEET_FAL_JWKS_URL", reason: "'\(jwks)' is not an http(s) URL")
        }
        return WebhookSettings(
            falJWKSURL: jwks, replicate: replicate,
            maxBodyBytes: try reader.integer("FLEET_WEBHOOK_MAX_BYTES", default: 8 << 20, range: 1024...(64 << 20)))
    }
}
