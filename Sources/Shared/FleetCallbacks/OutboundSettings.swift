import FleetSupport
import Foundation

/// What callbacks and HTTP jobs need from the environment (`docs/configuration.md`, "Callbacks
/// and HTTP jobs"): the allow-list, the signing secrets, the named header secrets. Read by the
/// dispatcher, which both checks URLs as they are submitted and runs the deliveries.
public struct OutboundSettings: Sendable {
    public let policy: OutboundPolicy
    /// Nil when no host is allowed (then nothing is ever sent and no secret is needed).
    public let signer: StandardWebhook?
    /// Name → header value, for `http.request`'s `secretHeaders`. Never logged.
    public let secrets: [String: String]
    public let callbackTimeout: Duration
    /// Jobs of each outbound kind one dispatcher runs at once.
    public let concurrency: Int

    /// Nothing allowed, nothing signed: callbacks and HTTP jobs are refused at submission.
    public static let off = OutboundSettings(policy: .closed, signer: nil, secrets: [:], callbackTimeout: .seconds(10), concurrency: 32)

    public init(policy: OutboundPolicy, signer: StandardWebhook?, secrets: [String: String], callbackTimeout: Duration, concurrency: Int) {
        self.policy = policy
        self.signer = signer
        self.secrets = secrets
        self.callbackTimeout = callbackTimeout
        self.concurrency = concurrency
    }

    /// Whether anything may be sent: the dispatcher runs the deliveries only then.
    public var isOn: Bool { signer != nil }

    public static func load(from environment: [String: String]) throws -> OutboundSettings {
        let reader = EnvironmentReader(environment: environment)
        let hosts = try OutboundPolicy.parse(entries: try reader.list("FLEET_OUTBOUND_HOSTS") ?? [], variable: "FLEET_OUTBOUND_HOSTS")
        let timeout = try reader.duration("FLEET_CALLBACK_TIMEOUT_MS", unit: .milliseconds(1), default: 10_000, range: 100...120_000)
        let concurrency = try reader.integer("FLEET_OUTBOUND_CONCURRENCY", default: 32, range: 1...1000)
        var secrets: [String: String] = [:]
        if let text = environment["FLEET_OUTBOUND_SECRETS"], !text.isEmpty {
            // The reason never quotes the text: it is secret.
            guard let map = try? JSONDecoder().decode([String: String].self, from: Data(text.utf8)) else {
                throw ConfigurationError(variable: "FLEET_OUTBOUND_SECRETS", reason: "not a JSON object of names to string values")
            }
            secrets = map
        }
        guard !hosts.isEmpty else { return OutboundSettings(policy: .closed, signer: nil, secrets: secrets, callbackTimeout: timeout, concurrency: concurrency) }
        guard let current = environment["FLEET_CALLBACK_SECRET"], !current.isEmpty else {
            throw ConfigurationError(variable: "FLEET_CALLBACK_SECRET", reason: "required while FLEET_OUTBOUND_HOSTS allows hosts: every callback and HTTP job is signed")
        }
        let previous = environment["FLEET_CALLBACK_PREVIOUS_SECRET"].flatMap { $0.isEmpty ? nil : $0 }
        let signer: StandardWebhook
        do {
            signer = try StandardWebhook(secrets: [current] + (previous.map { [$0] } ?? []))
        } catch {
            throw ConfigurationError(variable: previous == nil ? "FLEET_CALLBACK_SECRET" : "FLEET_CALLBACK_SECRET or FLEET_CALLBACK_PREVIOUS_SECRET", reason: "\(error)")
        }
        return OutboundSettings(
            policy: OutboundPolicy(allowList: hosts), signer: signer, secrets: secrets, callbackTimeout: timeout, concurrency: concurrency)
    }
}
