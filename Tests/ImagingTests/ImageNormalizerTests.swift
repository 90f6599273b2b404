import CVipsShims
import CVips
import FleetStorage
@testable import FleetTestSupport
import Foundation
@testable import Imaging
import Testing

/// The normalise pipeline with real libvips on the real corpus and on generated bad inputs.
@Suite struct ImageNormalizerTests {
    /// Display size (after EXIF orientation) of each corpus file.
    static let corpusFiles: [(String, Int, Int)] = [
        ("bythewater-2560x1600.jpg", 2560, 1600), ("colorfulcups-2560x1600.jpg", 2560, 1600),
        ("honeywave-1080x1920.jpg", 1080, 1920), ("phone-4032x3024-orient6.jpg", 3024, 4032),
        ("colorfulcups-960x600-rgba.png", 960, 600), ("colorfulcups-1920x1200.webp", 1920, 1200),
        ("colorfulcups-1920x1200.heic", 1920, 1200),
    ]

    /// Each built-in profile on each corpus file: within its box, aspect kept, EXIF orientation
    /// applied, sRGB, metadata stripped, the profile's JPEG quality, the colours of the upload.
    @Test(arguments: NormalizeProfiles.builtIn.names, corpusFiles)
    func normalisesEveryCorpusFile(profileName: String, file: (String, Int, Int)) throws {
        let (name, displayWidth, displayHeight) = file
        let profile = try NormalizeProfiles.builtIn.profile(named: profileName)
        let input = corpus.appendingPathComponent(name).path
        let before = try Data(contentsOf: URL(fileURLWithPath: input))
        let image = try ImageNormalizer(profile: profile).normalize(path: input)

        // Within the box, never upscaled, aspect kept (orientation applied): the display size
        // scaled by the tighter bound, to the pixel.
        let scale = min(1, Double(profile.maxWidth ?? .max) / Double(displayWidth), Double(profile.maxHeight ?? .max) / Double(displayHeight))
        #expect(abs(Double(image.width) - Double(displayWidth) * scale) <= 1, "\(profileName) \(name): \(image.width)x\(image.height)")
        #expect(abs(Double(image.height) - Double(displayHeight) * scale) <= 1, "\(profileName) \(name): \(image.width)x\(image.height)")
        #expect(image.width <= profile.maxWidth ?? .max && image.height <= profile.maxHeight ?? .max)
        let output = temporaryPath("normalized") + ".jpg"
        try AtomicFile.write(image.jpeg, to: output)
        let decoded = try VipsImageRef.open(output)
        #expect(decoded.width == image.width && decoded.height == image.height)
        #expect(decoded.bands == 3 && !decoded.hasAlpha)
        #expect(decoded.interpretation == VIPS_INTERPRETATION_sRGB)
        // Metadata stripped: no EXIF (so no GPS, no orientation), no XMP, no ICC.
        for field in ["exif-data", "xmp-data", "icc-profile-data", "orientation"] {
            #expect(decoded.withPointer { vips_image_get_typeof($0, field) } == 0, "\(field) left in \(name)")
        }
        #expect(jpegLuminanceTable(image.jpeg) == ijgLuminanceTable(quality: profile.quality))
        // The same colours as the default profile's output: a smaller box or another quality
        // moves the mean by a few levels at most.
        if profileName != NormalizeProfiles.defaultName {
            let (mean, uploadMean) = (try meanLevel(image.jpeg), try meanLevel(try ImageNormalizer().normalize(path: input).jpeg))
            #expect(abs(mean - uploadMean) <= 3, "\(profileName) \(name): mean \(mean), upload's \(uploadMean)")
        }
        // The upload is untouched.
        #expect(try Data(contentsOf: URL(fileURLWithPath: input)) == before)
    }

    /// Mean of every band of every pixel of a JPEG.
    func meanLevel(_ jpeg: Data) throws -> Double {
        var mean = 0.0
        #expect(try VipsImageRef.decode(jpeg).withPointer { fleet_vips_average($0, &mean) } == 0)
        return mean
    }

    @Test func badInputsEndWithTheirCodes() throws {
        let folder = temporaryPath("bad-images")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        for (name, data, code) in try badImageInputs() {
            let path = "\(folder)/\(name)"
            try data.write(to: URL(fileURLWithPath: path))
            #expect {
                _ = try ImageNormalizer().normalize(path: path)
            } throws: { error in
                (error as? ImageError)?.code.rawValue == code
            }
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == data, "\(name) was modified")
        }
        #expect(throws: ImageError.tooLarge("2775348 bytes, more than 1000000")) {
            _ = try ImageNormalizer(limits: ImageLimits(maxBytes: 1_000_000)).normalize(path: corpus.appendingPathComponent("phone-4032x3024-orient6.jpg").path)
        }
    }
}

extension ImageNormalizerTests {
    /// Untagged images keep their colours (libvips 8.14 shifts them when asked to export an
    /// sRGB profile: pure blue came out as 85,15,253), and transparency becomes white.
    @Test func untaggedColoursSurviveAndTransparencyTurnsWhite() throws {
        let cases: [(name: String, pixel: [UInt8], expected: [Double])] = [
            ("blue", [0, 0, 255, 255], [0, 0, 255]), ("grey", [128, 128, 128, 255], [128, 128, 128]),
            ("transparent", [0, 0, 0, 0], [255, 255, 255]),
        ]
        for (name, pixel, expected) in cases {
            let input = temporaryPath(name) + ".png"
            try pngRGBA(width: 64, height: 64, pixel: pixel).write(to: URL(fileURLWithPath: input))
            let output = temporaryPath(name) + ".jpg"
            try AtomicFile.write(try ImageNormalizer().normalize(path: input).jpeg, to: output)
            var rgb = [0.0, 0.0, 0.0]
            #expect(try VipsImageRef.open(output).withPointer { fleet_vips_pixel($0, 32, 32, &rgb, 3) } == 0)
            for band in 0..<3 { #expect(abs(rgb[band] - expected[band]) <= 6, "\(name): \(rgb)") }
        }
    }
}

/// Generated bad uploads, each with the code it must end with: truncated, empty, text, a
/// 30000 × 30000 PNG bomb, SVG.
func badImageInputs() throws -> [(name: String, data: Data, code: String)] {
    let phone = try Data(contentsOf: corpus.appendingPathComponent("phone-4032x3024-orient6.jpg"))
    return [
        ("truncated.jpg", phone.prefix(phone.count / 3), "IMAGE_INVALID"),
        ("empty.jpg", Data(), "IMAGE_INVALID"),
        ("text.jpg", Data("this is not an image\n".utf8), "IMAGE_INVALID"),
        ("bomb.png", pngHeaderOnly(width: 30_000, height: 30_000), "IMAGE_TOO_LARGE"),
        ("vector.svg", Data(#"<svg xmlns="http://www.w3.org/2000/svg" width="4000" height="4000"><rect width="10" height="10"/></svg>"#.utf8), "IMAGE_UNSUPPORTED"),
    ]
}

/// The first (luminance) quantisation table of a JPEG, in the file's zig-zag order.
func jpegLuminanceTable(_ jpeg: Data) -> [Int] {
    let bytes = [UInt8](jpeg)
    var index = 2
    while index + 4 < bytes.count, bytes[index] == 0xFF {
        let marker = bytes[index + 1]
        let length = Int(bytes[index + 2]) << 8 | Int(bytes[index + 3])
        if marker == 0xDB, bytes[index + 4] & 0x0F == 0 { return bytes[(index + 5)..<(index + 69)].map(Int.init) }
        index += 2 + length
    }
    return []
}

/// libjpeg's luminance table for `quality`, in zig-zag order.
func ijgLuminanceTable(quality: Int) -> [Int] {
    let standard = [16, 11, 12, 14, 12, 10, 16, 14, 13, 14, 18, 17, 16, 19, 24, 40, 26, 24, 22, 22, 24, 49, 35, 37, 29, 40, 58, 51,
                    61, 60, 57, 51, 56, 55, 64, 72, 92, 78, 64, 68, 87, 69, 55, 56, 80, 109, 81, 87, 95, 98, 103, 104, 103, 62, 77,
                    113, 121, 112, 100, 120, 92, 101, 103, 99]
    let scale = quality < 50 ? 5000 / quality : 200 - 2 * quality
    return standard.map { min(255, max(1, ($0 * scale + 50) / 100)) }
}
