import CVipsShims
import CVips
import Foundation

/// Limits checked on the header, before any pixel is decoded.
public struct ImageLimits: Sendable, Equatable {
    public var maxBytes: Int
    public var maxPixels: Int

    /// Admits a 48 MP phone photo (8064 × 6048) with room to spare.
    public init(maxBytes: Int = 60 << 20, maxPixels: Int = 60_000_000) {
        self.maxBytes = maxBytes
        self.maxPixels = maxPixels
    }
}

/// A normalised upload: JPEG bytes and their size.
public struct NormalizedImage: Sendable {
    public let jpeg: Data
    public let width: Int
    public let height: Int
}

/// One libvips pipeline per upload: header checks, shrink-on-load thumbnail into the
/// profile's box (never upscaled, aspect kept) with EXIF orientation applied, alpha flattened
/// on white, sRGB, metadata stripped, JPEG at the profile's quality with optimised Huffman tables.
public struct ImageNormalizer: Sendable {
    public var limits: ImageLimits
    public var profile: NormalizeProfile

    /// The loaders accepted: JPEG, PNG, WebP, HEIC (libvips class-name prefixes).
    static let acceptedLoaders = ["VipsForeignLoadJpeg", "VipsForeignLoadPng", "VipsForeignLoadWebp", "VipsForeignLoadHeif"]

    public init(limits: ImageLimits = ImageLimits(), profile: NormalizeProfile = .upload) {
        self.limits = limits
        self.profile = profile
    }

    /// The same limits, another profile.
    public func with(_ profile: NormalizeProfile) -> ImageNormalizer {
        ImageNormalizer(limits: limits, profile: profile)
    }

    /// Normalises the file at `path`. Blocking and CPU-bound: call it off the cooperative pool.
    public func normalize(path: String) throws -> NormalizedImage {
        try Vips.start()
        let hasICCProfile = try checkHeader(path: path)
        let failOn = Int32(VIPS_FAIL_ON_ERROR.rawValue)
        // Only a file with an embedded profile is converted through it: libvips 8.14 shifts the
        // colours of untagged images when asked for an export profile (libvips#3479). Untagged
        // images are taken as sRGB already, or converted by colourspace below.
        // 0 leaves a side unbounded (the shim's convention).
        let (width, height) = (Int32(profile.maxWidth ?? 0), Int32(profile.maxHeight ?? 0))
        let image = try VipsImageRef.make { fleet_vips_thumbnail(path, $0, width, height, failOn, hasICCProfile ? "srgb" : nil) }
            .flattenedSRGB()
        return NormalizedImage(jpeg: try image.jpeg(quality: profile.quality), width: image.width, height: image.height)
    }

    /// Size, format and pixel count, read from the header only. Returns whether the file
    /// carries an ICC profile.
    private func checkHeader(path: String) throws -> Bool {
        let attributes = try? FileManager.default.attributesOfItem(atPath: path)
        guard let bytes = (attributes?[.size] as? NSNumber)?.intValue else { throw ImageError.invalid("cannot read \(path)") }
        guard bytes > 0 else { throw ImageError.invalid("empty file") }
        guard bytes <= limits.maxBytes else { throw ImageError.tooLarge("\(bytes) bytes, more than \(limits.maxBytes)") }
        guard let loader = vips_foreign_find_load(path).map({ String(cString: $0) }) else {
            vips_error_clear()
            throw ImageError.invalid("not an image libvips recognises")
        }
        guard ImageNormalizer.acceptedLoaders.contains(where: loader.hasPrefix) else {
            throw ImageError.unsupported("\(loader.replacingOccurrences(of: "VipsForeignLoad", with: "")) images are not accepted (JPEG, PNG, WebP, HEIC)")
        }
        let image = try VipsImageRef.open(path)
        let pixels = image.width * image.height * max(1, image.pages)
        guard pixels <= limits.maxPixels else {
            throw ImageError.tooLarge("\(image.width) × \(image.height) is \(pixels) pixels, more than \(limits.maxPixels)")
        }
        return image.withPointer { vips_image_get_typeof($0, "icc-profile-data") != 0 }
    }
}
