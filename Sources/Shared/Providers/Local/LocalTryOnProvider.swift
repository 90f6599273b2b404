import FleetSupport
import Foundation
import Imaging

/// The embedded default, offline and free, and **not AI**: libvips lays the garment's
/// cut-out over the body photo at a place fixed per category. It shows the whole pipeline
/// working without provider keys; it does not fit, warp or shade anything.
public struct LocalTryOnProvider: TryOnProvider {
    public static let name = "local"
    public var name: String { Self.name }
    public static let categories = Set(GarmentCategory.allCases)
    public var supportedCategories: Set<GarmentCategory> { Self.categories }

    public init() {}

    public func submit(_ request: TryOnRequest) async throws(ProviderError) -> ProviderSubmission {
        let composite: Data
        do {
            let (width, top) = Self.placement(request.category)
            composite = try await offload {
                try GarmentOverlay.composite(body: request.person.bytes, garment: request.garment.bytes, widthFraction: width, topFraction: top)
            }
        } catch {
            throw ProviderError.rejected(provider: name, status: 422, message: "cannot composite these images: \(error)")
        }
        return ProviderSubmission(
            provider: name, jobID: "local-\(UUID().uuidString.lowercased())",
            state: .settled(.succeeded(.bytes(composite, mimeType: "image/jpeg"))))
    }

    public func result(of submission: ProviderSubmission) async throws(ProviderError) -> ProviderResult {
        guard case .settled(let result) = submission.state else {
            throw ProviderError.malformedResponse(provider: name, reason: "not a local submission")
        }
        return result
    }

    public func cancel(_ submission: ProviderSubmission) async {}

    /// Where the garment goes, as fractions of the body photo: width, and the top edge.
    static func placement(_ category: GarmentCategory) -> (width: Double, top: Double) {
        switch category {
        case .tops: (0.50, 0.22)
        case .outerwear: (0.56, 0.20)
        case .dresses: (0.50, 0.22)
        case .bottoms: (0.42, 0.48)
        case .shoes: (0.34, 0.82)
        }
    }
}

extension LocalTryOnProvider {
    /// The default: no settings, a second or so per render, no limit of its own.
    public static let registration = TryOnProviderRegistration(
        name: name, categories: categories, assumedLatency: .seconds(1), make: { _, _ in LocalTryOnProvider() })
}
