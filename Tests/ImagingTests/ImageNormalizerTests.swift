import CVipsShims
import CVips
import FleetStorage
import Foundation
@testable import Imaging
import Testing

/// Real photos kept in the repository (`Tests/Fixtures/corpus/README.md`).
let corpus = packageRoot.appendingPathComponent("Tests/Fixtures/corpus")

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

/// An uncompressed RGBA PNG of one colour (zlib stored blocks, so no compressor is needed).
func pngRGBA(width: Int, height: Int, pixel: [UInt8]) -> Data {
    pngRGBA(width: width, height: height) { _, _ in pixel }
}

/// An uncompressed RGBA PNG, each pixel from `pixelAt(x, y)`.
func pngRGBA(width: Int, height: Int, pixelAt: (Int, Int) -> [UInt8]) -> Data {
    var raw: [UInt8] = []
    raw.reserveCapacity(height * (width * 4 + 1))
    for y in 0..<height {
        raw.append(0)
        for x in 0..<width { raw += pixelAt(x, y) }
    }
    var zlib: [UInt8] = [0x78, 0x01]
    var offset = 0
    repeat {
        let size = min(65_535, raw.count - offset)
        let final: UInt8 = offset + size == raw.count ? 1 : 0
        zlib += [final, UInt8(size & 0xFF), UInt8(size >> 8), UInt8(~size & 0xFF), UInt8((~size >> 8) & 0xFF)]
        zlib += raw[offset..<(offset + size)]
        offset += size
    } while offset < raw.count
    var a: UInt32 = 1, b: UInt32 = 0
    for byte in raw { a = (a + UInt32(byte)) % 65_521; b = (b + a) % 65_521 }
    zlib += bigEndian(b << 16 | a)
    let header = bigEndian(UInt32(width)) + bigEndian(UInt32(height)) + [8, 6, 0, 0, 0]
    return png(header: header, data: zlib)
}

/// A PNG whose header claims `width` × `height` but whose pixel data is one empty zlib stream:
/// the shape of a decompression bomb, which must be refused from the header alone.
func pngHeaderOnly(width: UInt32, height: UInt32) -> Data {
    let header = bigEndian(width) + bigEndian(height) + [8, 2, 0, 0, 0]
    return png(header: header, data: [0x78, 0x9C, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01])
}

/// A PNG file: signature, IHDR `header`, one IDAT holding the zlib stream `data`, IEND.
func png(header: [UInt8], data: [UInt8]) -> Data {
    func chunk(_ type: String, _ body: [UInt8]) -> [UInt8] {
        let typed = Array(type.utf8) + body
        return bigEndian(UInt32(body.count)) + typed + bigEndian(crc32(typed))
    }
    return Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + chunk("IHDR", header) + chunk("IDAT", data) + chunk("IEND", []))
}

func bigEndian(_ value: UInt32) -> [UInt8] { [24, 16, 8, 0].map { UInt8((value >> $0) & 0xFF) } }

func crc32(_ bytes: [UInt8]) -> UInt32 {
    var crc: UInt32 = 0xFFFF_FFFF
    for byte in bytes {
        crc ^= UInt32(byte)
        for _ in 0..<8 { crc = (crc >> 1) ^ (crc & 1 == 1 ? 0xEDB8_8320 : 0) }
    }
    return ~crc
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
