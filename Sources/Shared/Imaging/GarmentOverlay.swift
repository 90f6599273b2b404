import CVipsShims
import Foundation

/// A garment laid over a body photo, scaled to a fraction of its width, centred, its top edge at
/// a fraction of its height: the offline `local` try-on, which is not AI.
public enum GarmentOverlay {
    /// JPEG (quality 85) of `garment` over `body`, both in any format libvips decodes.
    public static func composite(body bodyBytes: Data, garment garmentBytes: Data, widthFraction: Double, topFraction: Double) throws -> Data {
        let body = try VipsImageRef.decode(bodyBytes)
        let garment = try VipsImageRef.decode(garmentBytes)
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
