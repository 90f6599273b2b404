import FleetSupport
import Foundation

/// What callbacks and HTTP jobs need from the environment (`docs/configuration.md`, "Callbacks
/// and HTTP jobs"): the allow-list, the signing secrets, the named header secrets. Read by the
/// dispatcher, which both checks URLs as they are submitted and runs the deliveries.
public struct OutboundSettings: Sendable {
    public let policy: OutboundPolicy
    /// Signs `callback.deliver` (`FLEET_CALLBACK_SECRET`). Nil when no host is allowed (then
    /// nothing is ever sent and no secret is needed).
    public let callbackSigner: StandardWebhook?
    /// Signs `http.request` (`FLEET_HTTP_JOB_SECRET`), never with a callback secret: a client's
    /// request imitating a callback must not verify at a callback receiver. Nil when no host is
    /// allowed or the variable is unset: then `http.request` jobs are refused at submission.
    public let httpJobSigner: StandardWebhook?
    /// Name → header value, for `http.request`'s `secretHeaders`. Never logged.
    public let secrets: [String: String]
    public let callbackTimeout: Duration
    /// Jobs of each outbound kind one dispatcher runs at once.
    public let concurrency: Int

    /// Nothing allowed, nothing signed: callbacks and HTTP jobs are refused at submission.
    public static let off = OutboundSettings(
        policy: .closed, callbackSigner: nil, httpJobSigner: nil, secrets: [:], callbackTimeout: .seconds(10), concurrency: 32)

    public init(
        policy: OutboundPolicy, callbackSigner: StandardWebhook?, httpJobSigner: StandardWebhook?, secrets: [String: String],
        callbackTimeout: Duration, concurrency: Int
    ) {
        self.policy = policy
        self.callbackSigner = callbackSigner
        self.httpJobSigner = httpJobSigner
        self.secrets = secrets
        self.callbackTimeout = callbackTimeout
        self.concurrency = concurrency
    }

    /// Whether anything may be sent: the dispatcher runs the deliveries only then.
    public var isOn: Bool { callbackSigner != nil }

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
        guard !hosts.isEmpty else {
            return OutboundSettings(
                policy: .closed, callbackSigner: nil, httpJobSigner: nil, secrets: secrets, callbackTimeout: timeout, concurrency: concurrency)
        }
        guard let callback = try signer(environment, current: "FLEET_CALLBACK_SECRET", previous: "FLEET_CALLBACK_PREVIOUS_SECRET") else {
            throw ConfigurationError(variable: "FLEET_CALLBACK_SECRET", reason: "required while FLEET_OUTBOUND_HOSTS allows hosts: every callback is signed")
        }
        let httpJob = try signer(environment, current: "FLEET_HTTP_JOB_SECRET", previous: "FLEET_HTTP_JOB_PREVIOUS_SECRET")
        if let httpJob, httpJob.sharesSecret(with: callback) {
            throw ConfigurationError(
                variable: "FLEET_HTTP_JOB_SECRET", reason: "must differ from the callback secrets: an HTTP job must never verify as a callback")
        }
        return OutboundSettings(
            policy: OutboundPolicy(allowList: hosts), callbackSigner: callback, httpJobSigner: httpJob, secrets: secrets, callbackTimeout: timeout,
            concurrency: concurrency)
    }

    /// The signer of one pair of variables (current, and previous during a rotation); nil when
    /// `current` is unset or empty. The reason never quotes the secrets.
    private static func signer(_ environment: [String: String], current: String, previous: String) throws -> StandardWebhook? {
        guard let secret = environment[current], !secret.isEmpty else { return nil }
        let old = environment[previous].flatMap { $0.isEmpty ? nil : $0 }
        do {
            return try StandardWebhook(secrets: [secret] + (old.map { [$0] } ?? []))
        } catch {
            throw ConfigurationError(variable: old == nil ? current : "\(current) or \(previous)", reason: "\(error)")
        }
    }
}
