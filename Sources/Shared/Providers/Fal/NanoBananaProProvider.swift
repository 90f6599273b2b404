import FleetHTTPClient
import FleetSupport

/// Nano Banana Pro image edit on fal (`fal-ai/nano-banana-pro/edit`): a general image editor told
/// by a prompt to dress the person (first image) in the garment (second image). It can render
/// every category, shoes included.
public struct NanoBananaProProvider: FalTryOnProvider {
    public static let name = "fal-nano-banana-pro"

    public struct Input: Encodable, Equatable {
        var prompt: String
        var imageUrls: [String]
        var numImages = 1
        var outputFormat = "jpeg"
        var aspectRatio = "auto"
        var resolution = "1K"
        var seed: Int?
    }

    public let fal: FalQueueClient
    public var name: String { Self.name }
    /// Submit carries the `/edit` subpath; status and result use the URLs fal returns, without it.
    public var endpoint: String { "fal-ai/nano-banana-pro/edit" }
    public static let categories = Set(GarmentCategory.allCases)
    public var supportedCategories: Set<GarmentCategory> { Self.categories }

    public init(key: String, queueURL: String = FalQueueClient.defaultBaseURL, http: any HTTPClient) {
        self.fal = FalQueueClient(provider: Self.name, key: key, baseURL: queueURL, http: http)
    }

    public func input(for request: TryOnRequest) -> Input {
        Input(
            prompt: Self.prompt(for: request.category),
            imageUrls: [request.person.dataURI, request.garment.dataURI], seed: request.options.seed)
    }

    /// What to change for each category; everything else about the photo must stay as it is.
    static func prompt(for category: GarmentCategory) -> String {
        let change = switch category {
        case .tops: "Replace the top the person is wearing with the top"
        case .bottoms: "Replace the trousers, shorts or skirt the person is wearing with the bottoms"
        case .dresses: "Replace the outfit the person is wearing with the dress"
        case .shoes: "Replace the shoes the person is wearing with the shoes"
        case .outerwear: "Put the jacket or coat"
        }
        let placement = category == .outerwear ? " on the person, over their clothes" : ""
        return """
            Virtual try-on. The first image is a photo of a person; the second image shows a garment. \
            \(change) shown in the second image\(placement). Keep the garment's exact colour, pattern, \
            texture, logos and cut, fitted naturally to the person's body and pose with realistic folds \
            and shadows. Keep the person's face, hair, skin, body shape, pose, the rest of their clothing, \
            the background, lighting and framing unchanged. Photorealistic, the same size as the first image.
            """
    }
}

extension NanoBananaProProvider {
    /// fal's queue, as FASHN (`FAL_KEY`, `FAL_QUEUE_URL`).
    public static let registration = TryOnProviderRegistration(
        name: name, categories: categories, defaultLimit: ProviderLimit(maxRunning: 40),
        webhookSources: FalWebhookSource.sources,
        make: { settings, http throws(ConfigurationError) in
            NanoBananaProProvider(key: try settings.falKey(for: name), queueURL: settings.falQueueURL, http: http)
        })
}
