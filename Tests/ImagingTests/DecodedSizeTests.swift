@testable import FleetTestSupport
import Foundation
import Imaging
import Testing

/// `DecodedSize` decodes every pixel: a whole image gives its size, one cut short (what a partial
/// object or a torn write would hold) throws although its header is intact.
@Suite struct DecodedSizeTests {
    @Test func aWholeImageGivesItsSize() throws {
        let bytes = try Data(contentsOf: corpus.appendingPathComponent("colorfulcups-960x600-rgba.png"))
        #expect(try DecodedSize(decoding: bytes) == DecodedSize(width: 960, height: 600))
    }

    @Test func anImageCutShortDoesNotDecode() throws {
        let bytes = try Data(contentsOf: corpus.appendingPathComponent("colorfulcups-2560x1600.jpg"))
        #expect(throws: ImageError.self) { try DecodedSize(decoding: bytes.prefix(bytes.count / 2)) }
    }
}
