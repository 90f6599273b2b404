import FleetHTTPClient
import FleetSupport
import Foundation

/// Provider credentials and endpoints, from the environment (`docs/configuration.md`, Render
/// providers). Only the chosen provider's settings are required.
public struct ProviderSettings: Sendable {
    public var falKey: String?
    public var falQueueURL: String
    public var fashnMode: FashnProvider.Mode
    public var googleProject: String?
    public var googleLocation: String
    public var googleModel: String
    public var googleEndpoint: String?
    /// Path of a service-account key file.
    public var googleCredentialsFile: String?
    public var googleAccessToken: String?
    public var metadataHost: String

    public static func load(from environment: [String: String]) throws(ConfigurationError) -> ProviderSettings {
        func value(_ name: String) -> String? {
            guard let text = environment[name]?.trimmingCharacters(in: .whitespacesAndNewlines), !text.isEmpty else { return nil }
            return text
        }
        let mode = value("FAL_FASHN_MODE") ?? FashnProvider.Mode.balanced.rawValue
        guard let fashnMode = FashnProvider.Mode(rawValue: mode) else {
            throw ConfigurationError(variable: "FAL_FASHN_MODE", reason: "'\(mode)' is not performance, balanced or quality")
        }
        return ProviderSettings(
            falKey: value("FAL_KEY"),
            falQueueURL: value("FAL_QUEUE_URL") ?? FalQueueClient.defaultBaseURL,
            fashnMode: fashnMode,
            googleProject: value("GOOGLE_CLOUD_PROJECT"),
            googleLocation: value("GOOGLE_CLOUD_LOCATION") ?? "us-central1",
            googleModel: value("GOOGLE_VTO_MODEL") ?? "virtual-try-on-001",
            googleEndpoint: value("GOOGLE_VTO_ENDPOINT"),
            googleCredentialsFile: value("GOOGLE_APPLICATION_CREDENTIALS"),
            googleAccessToken: value("GOOGLE_ACCESS_TOKEN"),
            metadataHost: value("GCE_METADATA_HOST") ?? GoogleCredentials.defaultMetadataHost)
    }
}

/// What the fleet knows of one provider before making it: its name and categories, what
/// admission control assumes of it, and how to make it from the settings. Each provider's file
/// declares its own (`FashnProvider.registration`…); `TryOnProviders.registered` lists them.
public struct TryOnProviderRegistration: Sendable {
    public let name: String
    public let categories: Set<GarmentCategory>
    /// Its run time before any is on record (submit, wait, download: `RenderCapacity`).
    public let assumedLatency: Duration
    /// The limit on its key (`provider:<name>`) seeded by `fleet-defaults`; nil: none.
    public let defaultLimit: ProviderLimit?
    /// The webhook sources the dispatcher serves for it (`WebhookRoutes`); none for most.
    public let webhookSources: @Sendable (WebhookSettings, any HTTPClient) -> [any WebhookSource]
    /// Throws when its settings are missing or unusable (the message names the variable, never
    /// its value).
    public let make: @Sendable (ProviderSettings, any HTTPClient) throws(ConfigurationError) -> any TryOnProvider

    public init(
        name: String, categories: Set<GarmentCategory>, assumedLatency: Duration = .seconds(12), defaultLimit: ProviderLimit? = nil,
        webhookSources: @escaping @Sendable (WebhookSettings, any HTTPClient) -> [any WebhookSource] = { _, _ in [] },
        make: @escaping @Sendable (ProviderSettings, any HTTPClient) throws(ConfigurationError) -> any TryOnProvider
    ) {
        self.name = name
        self.categories = categories
        self.assumedLatency = assumedLatency
        self.defaultLimit = defaultLimit
        self.webhookSources = webhookSources
        self.make = make
    }
}

/// The providers the fleet can run, by name.
public enum TryOnProviders {
    /// Every provider, the default first. Adding one: its file in `Providers/` declaring its
    /// `registration`, its entry here, its settings in `ProviderSettings` (docs/renders.md).
    public static let registered: [TryOnProviderRegistration] = [
        LocalTryOnProvider.registration, FashnProvider.registration, NanoBananaProProvider.registration,
        GoogleVirtualTryOnProvider.registration,
    ]

    /// The provider renders use until an operator chooses one (`render.provider`).
    public static let defaultName = registered[0].name

    public static let names = registered.map(\.name)

    public static func registration(named name: String) -> TryOnProviderRegistration? {
        registered.first { $0.name == name }
    }

    /// The categories a provider supports, by name; empty for an unknown name.
    @Sendable public static func supportedCategories(_ name: String) -> Set<GarmentCategory> {
        registration(named: name)?.categories ?? []
    }

    /// A provider's run time before any is on record (an unknown name: a remote provider's).
    public static func assumedLatency(_ name: String) -> Duration {
        registration(named: name)?.assumedLatency ?? .seconds(12)
    }

    /// The webhook sources of every provider, each once (two fal models share fal's).
    public static func webhookSources(settings: WebhookSettings, http: any HTTPClient) -> [any WebhookSource] {
        var seen: Set<String> = []
        return registered.flatMap { $0.webhookSources(settings, http) }.filter { seen.insert($0.provider).inserted }
    }

    /// Throws when the name is unknown or the provider's settings are missing or unusable
    /// (the message names the variable, never its value).
    public static func make(
        name: String, settings: ProviderSettings, http: any HTTPClient, among registered: [TryOnProviderRegistration] = registered
    ) throws(ConfigurationError) -> any TryOnProvider {
        guard let registration = registered.first(where: { $0.name == name }) else {
            throw ConfigurationError(variable: "render provider", reason: "'\(name)' is not one of \(registered.map(\.name).joined(separator: ", "))")
        }
        return try registration.make(settings, http)
    }
}
