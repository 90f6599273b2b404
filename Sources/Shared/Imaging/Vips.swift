import CVipsShims
import CVips
import Foundation
import Synchronization

/// libvips, started once per process: untrusted loaders (SVG, PDF, ImageMagick…) blocked,
/// the operation cache off (uploads are never processed twice).
public enum Vips {
    private static let started: Bool = {
        guard fleet_vips_init("wearbloom-fleet") == 0 else { return false }
        vips_block_untrusted_set(1)
        vips_cache_set_max(0)
        return true
    }()

    static func start() throws {
        guard started else { throw ImageError.invalid("libvips failed to start: \(takeError())") }
    }

    /// Sizes libvips' thread pool so that `jobs` images processed at once use about one
    /// thread per core in total: on 2 cores, two concurrent normalises run single-threaded
    /// (15 % faster on the corpus than two pools of two fighting), one runs on both cores.
    public static func shareCores(among jobs: Int) throws {
        try start()
        vips_concurrency_set(Int32(max(1, ProcessInfo.processInfo.activeProcessorCount / max(1, jobs))))
    }

    /// The text of libvips' last error(s), cleared for the next call.
    static func takeError() -> String {
        let text = String(cString: vips_error_buffer()).trimmingCharacters(in: .whitespacesAndNewlines)
        vips_error_clear()
        return text.isEmpty ? "unknown libvips error" : text
    }
}

/// An owned `VipsImage *`, released when dropped.
final class VipsImageRef {
    private let pointer: UnsafeMutablePointer<VipsImage>

    init(_ pointer: UnsafeMutablePointer<VipsImage>) { self.pointer = pointer }
    deinit { fleet_vips_unref(pointer) }

    /// Lends the raw image to C code; the reference stays alive until `body` returns (Swift
    /// may otherwise release it right after reading the pointer, before the call runs).
    func withPointer<R>(_ body: (UnsafeMutablePointer<VipsImage>) throws -> R) rethrows -> R {
        try withExtendedLifetime(self) { try body(pointer) }
    }

    var width: Int { Int(vips_image_get_width(pointer)) }
    var height: Int { Int(vips_image_get_height(pointer)) }
    var bands: Int { Int(vips_image_get_bands(pointer)) }
    var hasAlpha: Bool { vips_image_hasalpha(pointer) != 0 }
    var interpretation: VipsInterpretation { vips_image_get_interpretation(pointer) }
    var pages: Int { Int(vips_image_get_n_pages(pointer)) }

    /// Opens a file lazily (header only).
    static func open(_ path: String) throws -> VipsImageRef {
        try Vips.start()
        guard let image = fleet_vips_open(path, Int32(VIPS_FAIL_ON_ERROR.rawValue)) else { throw ImageError.invalid(Vips.takeError()) }
        return VipsImageRef(image)
    }

    /// Runs a libvips operation that writes one output image.
    static func make(_ operation: (UnsafeMutablePointer<UnsafeMutablePointer<VipsImage>?>) -> Int32) throws -> VipsImageRef {
        var out: UnsafeMutablePointer<VipsImage>?
        guard operation(&out) == 0, let out else { throw ImageError.invalid(Vips.takeError()) }
        return VipsImageRef(out)
    }

    /// Decodes an encoded image held in memory. The pixels are copied out while the bytes are
    /// lent, since libvips reads a buffer lazily and would outlive it.
    static func decode(_ data: Data) throws -> VipsImageRef {
        try Vips.start()
        return try data.withUnsafeBytes { bytes in
            guard let base = bytes.baseAddress, let lazy = fleet_vips_open_buffer(base, bytes.count, Int32(VIPS_FAIL_ON_ERROR.rawValue)) else {
                throw ImageError.invalid(Vips.takeError())
            }
            let lazyImage = VipsImageRef(lazy)
            guard let decoded = lazyImage.withPointer({ vips_image_copy_memory($0) }) else { throw ImageError.invalid(Vips.takeError()) }
            return VipsImageRef(decoded)
        }
    }

    /// JPEG bytes, metadata stripped, optimised Huffman tables.
    func jpeg(quality: Int) throws -> Data {
        try encoded { fleet_vips_jpeg_buffer($0, $1, $2, Int32(quality)) }
    }

    /// PNG bytes, metadata stripped.
    func png() throws -> Data {
        try encoded { fleet_vips_png_buffer($0, $1, $2) }
    }

    private func encoded(
        _ save: (UnsafeMutablePointer<VipsImage>, UnsafeMutablePointer<UnsafeMutableRawPointer?>, UnsafeMutablePointer<Int>) -> Int32
    ) throws -> Data {
        var buffer: UnsafeMutableRawPointer?
        var length = 0
        guard withPointer({ save($0, &buffer, &length) }) == 0, let buffer else { throw ImageError.invalid(Vips.takeError()) }
        defer { fleet_g_free(buffer) }
        return Data(bytes: buffer, count: length)
    }

    /// Alpha flattened on white and colour converted to sRGB, where needed.
    func flattenedSRGB() throws -> VipsImageRef {
        var image = self
        if image.hasAlpha {
            let source = image
            image = try source.withPointer { input in try VipsImageRef.make { fleet_vips_flatten_white(input, $0) } }
        }
        if image.interpretation != VIPS_INTERPRETATION_sRGB {
            let source = image
            image = try source.withPointer { input in try VipsImageRef.make { fleet_vips_to_srgb(input, $0) } }
        }
        return image
    }
}
