import CFleetShims
import FleetSupport
import Foundation

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
            composite = try await offload { try Self.composite(request) }
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

    static func composite(_ request: TryOnRequest) throws -> Data {
        let body = try VipsImageRef.decode(request.person.bytes)
        let garment = try VipsImageRef.decode(request.garment.bytes)
        let (widthFraction, topFraction) = placement(request.category)
        let width = max(1, Int(Double(body.width) * widthFraction))
        let height = max(1, garment.height * width / max(1, garment.width))
        let scaled = try garment.withPointer { input in
            try VipsImageRef.make { fleet_vips_resize_exact(input, $0, Int32(width), Int32(height)) }
        }
        let x = Int32((body.width - width) / 2)
        let y = Int32(min(Double(body.height - 1), Double(body.height) * topFraction))
        let laid = try body.withPointer { base in
            try scaled.withPointer { overlay in try VipsImageRef.make { fleet_vips_composite_over(base, overlay, x, y, $0) } }
        }
        return try laid.flattenedSRGB().jpeg(quality: 85)
    }
}
