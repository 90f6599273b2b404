import CVipsShims
import CVips
import Foundation

/// A garment cut out of its photo: the RGBA PNG, its preview on white, and how much of the
/// photo the garment covers.
public struct Cutout: Sendable {
    public let png: Data
    public let preview: Data
    public let width: Int
    public let height: Int
    /// Mean opacity of the photo after removal, 0...1: near 0 or 1 means removal found no
    /// garment or no background, the app's cue for "Retake".
    public let foregroundFraction: Double
}

/// Everything libvips does around the model: the model's alpha applied to our own photo
/// (its colours, not the model's re-encoding), trimmed to the garment with a margin, a PNG
/// and a JPEG preview on white.
public struct CutoutComposer: Sendable {
    /// Margin kept around the garment, as a fraction of the photo's longer side.
    public var margin: Double
    public var previewQuality: Int

    public init(margin: Double = 0.03, previewQuality: Int = 80) {
        self.margin = margin
        self.previewQuality = previewQuality
    }

    /// A backend's answer that is not a usable cut-out.
    public struct UnusableCutout: Error, CustomStringConvertible {
        public let reason: String
        public var description: String { reason }
    }

    /// Applies the alpha of `cutout` (a backend's answer) to `photo`. Throws `UnusableCutout`
    /// when the answer cannot be used, `ImageError` when the photo cannot. Blocking and CPU-bound: call it off the cooperative pool.
    public func compose(photo: Data, cutout: Data) throws -> Cutout {
        let image = try VipsImageRef.decode(photo)
        let rgb = try image.withPointer { input in try VipsImageRef.make { fleet_vips_extract_band(input, $0, 0, 3) } }
        let alpha = try alphaBand(of: cutout, width: rgb.width, height: rgb.height)
        var fraction = 0.0
        guard alpha.withPointer({ fleet_vips_average($0, &fraction) }) == 0 else { throw ImageError.invalid(Vips.takeError()) }

        let rgba = try rgb.withPointer { colour in
            try alpha.withPointer { mask in try VipsImageRef.make { fleet_vips_bandjoin2(colour, mask, $0) } }
        }
        let trimmed = try trim(rgba, alpha: alpha)
        let preview = try trimmed.withPointer { input in try VipsImageRef.make { fleet_vips_flatten_white(input, $0) } }
        return Cutout(
            png: try trimmed.png(), preview: try preview.jpeg(quality: previewQuality),
            width: trimmed.width, height: trimmed.height, foregroundFraction: fraction / 255)
    }

    /// The answer's last band, at the photo's size, 8 bits.
    private func alphaBand(of cutout: Data, width: Int, height: Int) throws -> VipsImageRef {
        let answer: VipsImageRef
        do {
            answer = try VipsImageRef.decode(cutout)
        } catch let error as ImageError {
            throw UnusableCutout(reason: "cut-out does not decode: \(error)")
        }
        guard answer.hasAlpha else { throw UnusableCutout(reason: "cut-out has no alpha channel (\(answer.bands) bands)") }
        var alpha = try answer.withPointer { input in try VipsImageRef.make { fleet_vips_extract_band(input, $0, Int32(answer.bands - 1), 1) } }
        if alpha.width != width || alpha.height != height {
            let source = alpha
            alpha = try source.withPointer { input in try VipsImageRef.make { fleet_vips_resize_exact(input, $0, Int32(width), Int32(height)) } }
        }
        let source = alpha
        return try source.withPointer { input in try VipsImageRef.make { fleet_vips_cast_uchar(input, $0) } }
    }

    /// Crops to the garment's bounding box plus the margin; an empty cut-out stays whole.
    private func trim(_ rgba: VipsImageRef, alpha: VipsImageRef) throws -> VipsImageRef {
        var left: Int32 = 0, top: Int32 = 0, width: Int32 = 0, height: Int32 = 0
        guard alpha.withPointer({ fleet_vips_bounds($0, 10, &left, &top, &width, &height) }) == 0 else {
            throw ImageError.invalid(Vips.takeError())
        }
        guard width > 0, height > 0 else { return rgba }
        let pad = Int32((Double(max(rgba.width, rgba.height)) * margin).rounded())
        let x0 = max(0, left - pad), y0 = max(0, top - pad)
        let x1 = min(Int32(rgba.width), left + width + pad), y1 = min(Int32(rgba.height), top + height + pad)
        return try rgba.withPointer { input in try VipsImageRef.make { fleet_vips_crop(input, $0, x0, y0, x1 - x0, y1 - y0) } }
    }
}
