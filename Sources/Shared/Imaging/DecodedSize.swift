import Foundation

/// An encoded image's size, found by decoding every pixel: a truncated or corrupt file throws
/// `ImageError.invalid` here, where a look at its header alone would pass. For checks that read
/// stored outputs back (the chaos run).
public struct DecodedSize: Sendable, Equatable, CustomStringConvertible {
    public let width: Int
    public let height: Int

    public init(width: Int, height: Int) {
        self.width = width
        self.height = height
    }

    public init(decoding data: Data) throws {
        let image = try VipsImageRef.decode(data)
        self.init(width: image.width, height: image.height)
    }

    public var description: String { "\(width)x\(height)" }
}
