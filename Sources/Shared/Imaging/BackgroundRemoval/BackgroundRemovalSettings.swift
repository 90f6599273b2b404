import FleetHTTPClient
import FleetSupport

/// Which background-removal backends the image worker uses, in order, and how to reach them.
/// `docs/configuration.md` lists the variables.
public struct BackgroundRemovalSettings: Sendable {
    public enum Backend: String, Sendable, CaseIterable {
        case replicate, rembg, local
    }

    public var order: [Backend]
    public var replicateToken: String?
    public var replicateURL: String
    public var replicateModel: String
    public var rembgURL: String?
    public var rembgModel: String
    /// Each backend's own budget (`FLEET_CUTOUT_TIMEOUT_MS`, default 8 s), so that removal stays
    /// within the "add a garment" flow's 15 s (docs/product.md, "Images"). It is per backend: a
    /// chain that falls through two remote backends can spend twice this.
    public var timeout: Duration
    public var localThreshold: Double

    /// With `FLEET_CUTOUT_BACKENDS` unset the order is replicate, rembg, local, skipping the
    /// backends that have no credentials or URL; a backend named explicitly must be configured.
    public static func load(from environment: [String: String]) throws -> BackgroundRemovalSettings {
        let reader = EnvironmentReader(environment: environment)
        var settings = BackgroundRemovalSettings(
            order: [],
            replicateToken: environment["REPLICATE_API_TOKEN"].flatMap { $0.isEmpty ? nil : $0 },
            replicateURL: environment["FLEET_REPLICATE_URL"] ?? "https://api.replicate.com",
            replicateModel: environment["FLEET_REPLICATE_MODEL"] ?? "bria/remove-background",
            rembgURL: environment["FLEET_REMBG_URL"].flatMap { $0.isEmpty ? nil : $0 },
            rembgModel: environment["FLEET_REMBG_MODEL"] ?? "bria-rmbg",
            timeout: try reader.duration("FLEET_CUTOUT_TIMEOUT_MS", unit: .milliseconds(1), default: 8000, range: 100...120_000),
            localThreshold: Double(try reader.integer("FLEET_CUTOUT_LOCAL_THRESHOLD", default: 40, range: 1...441)))
        let variable = "FLEET_CUTOUT_BACKENDS"
        if let names = try reader.list(variable) {
            for name in names {
                guard let backend = Backend(rawValue: name.lowercased()) else {
                    throw ConfigurationError(variable: variable, reason: "unknown backend '\(name)' (replicate, rembg, local)")
                }
                guard settings.isConfigured(backend) else {
                    throw ConfigurationError(variable: variable, reason: "\(name) is listed but \(backend == .replicate ? "REPLICATE_API_TOKEN" : "FLEET_REMBG_URL") is not set")
                }
                settings.order.append(backend)
            }
        } else {
            settings.order = Backend.allCases.filter(settings.isConfigured)
        }
        return settings
    }

    func isConfigured(_ backend: Backend) -> Bool {
        switch backend {
        case .replicate: replicateToken != nil
        case .rembg: rembgURL != nil
        case .local: true
        }
    }

    /// The chain in the configured order; `only` restricts it to one backend (operators' one-shot runs).
    public func makeChain(http: any HTTPClient, only: Backend? = nil) throws -> BackgroundRemovalChain {
        let backends = try (only.map { [$0] } ?? order).map { backend -> any BackgroundRemover in
            guard isConfigured(backend) else {
                throw ConfigurationError(variable: "FLEET_CUTOUT_BACKENDS", reason: "\(backend.rawValue) is not configured")
            }
            return switch backend {
            case .replicate:
                ReplicateBackgroundRemover(baseURL: replicateURL, model: replicateModel, token: replicateToken ?? "", timeout: timeout, http: http)
            case .rembg:
                RembgBackgroundRemover(baseURL: rembgURL ?? "", model: rembgModel, timeout: timeout, http: http)
            case .local:
                LocalBackgroundRemover(threshold: localThreshold)
            }
        }
        return BackgroundRemovalChain(backends: backends)
    }
}
