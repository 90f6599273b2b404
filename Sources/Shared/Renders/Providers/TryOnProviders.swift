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

/// The configured provider by name.
public enum TryOnProviders {
    public static let names = [LocalTryOnProvider.name, FashnProvider.name, NanoBananaProProvider.name, GoogleVirtualTryOnProvider.name]

    /// The categories a provider supports, by name; empty for an unknown name.
    @Sendable public static func supportedCategories(_ name: String) -> Set<GarmentCategory> {
        switch name {
        case LocalTryOnProvider.name: LocalTryOnProvider.categories
        case FashnProvider.name: FashnProvider.categories
        case NanoBananaProProvider.name: NanoBananaProProvider.categories
        case GoogleVirtualTryOnProvider.name: GoogleVirtualTryOnProvider.categories
        default: []
        }
    }

    /// Throws when the name is unknown or the provider's settings are missing or unusable
    /// (the message names the variable, never its value).
    public static func make(name: String, settings: ProviderSettings, http: any HTTPClient) throws(ConfigurationError) -> any TryOnProvider {
        switch name {
        case LocalTryOnProvider.name:
            return LocalTryOnProvider()
        case FashnProvider.name:
            return FashnProvider(key: try falKey(settings, for: name), queueURL: settings.falQueueURL, mode: settings.fashnMode, http: http)
        case NanoBananaProProvider.name:
            return NanoBananaProProvider(key: try falKey(settings, for: name), queueURL: settings.falQueueURL, http: http)
        case GoogleVirtualTryOnProvider.name:
            return try google(settings, http: http)
        default:
            throw ConfigurationError(variable: "render provider", reason: "'\(name)' is not one of \(names.joined(separator: ", "))")
        }
    }

    private static func falKey(_ settings: ProviderSettings, for name: String) throws(ConfigurationError) -> String {
        guard let key = settings.falKey else { throw ConfigurationError(variable: "FAL_KEY", reason: "required by provider \(name)") }
        return key
    }

    /// Credentials in Google's own order: a given token, a key file, else the metadata server.
    private static func google(_ settings: ProviderSettings, http: any HTTPClient) throws(ConfigurationError) -> GoogleVirtualTryOnProvider {
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
        let endpoint = GoogleVirtualTryOnProvider.Endpoint(
            project: project, location: settings.googleLocation, model: settings.googleModel, baseURL: settings.googleEndpoint)
        return GoogleVirtualTryOnProvider(endpoint: endpoint, tokens: GoogleAccessTokens(credentials, http: http), http: http)
    }
}
