import FleetHTTPClient
import FleetSupport

/// FASHN try-on v1.6 on fal (`fal-ai/fashn/tryon/v1.6`), about 8 s in `balanced` mode.
///
/// FASHN knows `tops`, `bottoms` and `one-pieces`. Outerwear is an upper-body garment, so it is
/// sent as `tops`; dresses are `one-pieces`. Shoes are outside FASHN's model: not supported.
public struct FashnProvider: FalTryOnProvider {
    public static let name = "fal-fashn"

    public enum Mode: String, Encodable, Sendable { case performance, balanced, quality }

    public struct Input: Encodable, Equatable {
        var modelImage: String
        var garmentImage: String
        var category: String
        var mode: Mode
        var garmentPhotoType = "auto"
        var numSamples = 1
        var outputFormat = "jpeg"
        var seed: Int?
    }

    public let fal: FalQueueClient
    public let mode: Mode
    public var name: String { Self.name }
    public var endpoint: String { "fal-ai/fashn/tryon/v1.6" }
    public static let categories: Set<GarmentCategory> = [.tops, .bottoms, .dresses, .outerwear]
    public var supportedCategories: Set<GarmentCategory> { Self.categories }

    public init(key: String, queueURL: String = FalQueueClient.defaultBaseURL, mode: Mode = .balanced, http: any HTTPClient) {
        self.fal = FalQueueClient(provider: Self.name, key: key, baseURL: queueURL, http: http)
        self.mode = mode
    }

    public func input(for request: TryOnRequest) -> Input {
        Input(
            modelImage: request.person.dataURI, garmentImage: request.garment.dataURI,
            category: Self.fashnCategory(request.category), mode: mode, seed: request.options.seed)
    }

    static func fashnCategory(_ category: GarmentCategory) -> String {
        switch category {
        case .tops, .outerwear: "tops"
        case .bottoms: "bottoms"
        case .dresses: "one-pieces"
        case .shoes: "auto"  // never sent: shoes are not in supportedCategories
        }
    }
}

extension FashnProvider {
    /// fal's queue: `FAL_KEY`, `FAL_QUEUE_URL`, `FAL_FASHN_MODE`; an account runs so many at
    /// once (`RenderCapacity`); outcomes come by fal's webhook.
    public static let registration = TryOnProviderRegistration(
        name: name, categories: categories, defaultLimit: ProviderLimit(maxRunning: 40),
        webhookSources: FalWebhookSource.sources,
        make: { settings, http throws(ConfigurationError) in
            FashnProvider(key: try settings.falKey(for: name), queueURL: settings.falQueueURL, mode: settings.fashnMode, http: http)
        })
}
