import FleetHTTPClient
import Synchronization

/// The providers by name, each made once on first use with the process's settings.
public final class ProviderCatalog: Sendable {
    private let settings: ProviderSettings
    private let http: any HTTPClient
    /// The providers it can make: `TryOnProviders.registered` (tests add their own).
    private let registered: [TryOnProviderRegistration]
    private let made = Mutex<[String: any TryOnProvider]>([:])

    public init(settings: ProviderSettings, http: any HTTPClient, registered: [TryOnProviderRegistration] = TryOnProviders.registered) {
        self.settings = settings
        self.http = http
        self.registered = registered
    }

    public func provider(named name: String) throws -> any TryOnProvider {
        if let provider = made.withLock({ $0[name] }) { return provider }
        let provider = try TryOnProviders.make(name: name, settings: settings, http: http, among: registered)
        made.withLock { $0[name] = provider }
        return provider
    }
}
