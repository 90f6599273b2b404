import Foundation
import Imaging

/// Real photos kept in the repository (`Tests/Fixtures/corpus/README.md`).
let corpus = packageRoot.appendingPathComponent("Tests/Fixtures/corpus")

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

/// A red T-shirt on a plain, slightly noisy light-grey background, normalised like an upload.
/// 600 × 800; the shirt covers 24.8 % of it.
let plainBackgroundGarment: Data = {
    let png = pngRGBA(width: 600, height: 800) { x, y in
        let body = (200..<400).contains(x) && (200..<700).contains(y)
        let sleeves = (120..<480).contains(x) && (200..<320).contains(y)
        if body || sleeves { return [180, 30, 40, 255] }
        let noise = UInt8((x * 7 + y * 13) % 5)
        return [232 + noise, 230 + noise, 228 + noise, 255]
    }
    let path = temporaryPath("garment") + ".png"
    try! png.write(to: URL(fileURLWithPath: path))
    return try! ImageNormalizer().normalize(path: path).jpeg
}()
