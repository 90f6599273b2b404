import CVipsShims
import FleetSupport
import Foundation

/// The offline fallback, and the weakest backend: it only works for a garment shot on a
/// plain, evenly lit background. Pixels close in colour to the border's median colour and
/// connected to the border become transparent; the edge is softened by a small blur.
/// A garment the colour of its background, or a busy background, defeats it.
public struct LocalBackgroundRemover: BackgroundRemover {
    public let name = "local"
    /// RGB distance under which a pixel counts as background.
    public var threshold: Double
    /// Sigma of the edge blur, in pixels.
    public var feather: Double

    public init(threshold: Double = 40, feather: Double = 1.2) {
        self.threshold = threshold
        self.feather = feather
    }

    public func cutout(of photo: Data) async throws -> Data {
        try await offload { try cutoutNow(of: photo) }
    }

    func cutoutNow(of photo: Data) throws -> Data {
        let image = try VipsImageRef.decode(photo)
        let rgb = try image.withPointer { input in try VipsImageRef.make { fleet_vips_extract_band(input, $0, 0, 3) } }
        let alpha = try rgb.withPointer { input in
            try VipsImageRef.make { fleet_vips_plain_background_alpha(input, threshold, feather, $0) }
        }
        let rgba = try rgb.withPointer { colour in
            try alpha.withPointer { mask in try VipsImageRef.make { fleet_vips_bandjoin2(colour, mask, $0) } }
        }
        return try rgba.png()
    }
}
