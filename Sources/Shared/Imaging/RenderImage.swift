import Foundation

/// A provider's result checked and stored the fleet's way: it must decode; alpha is
/// flattened on white, colour made sRGB, metadata stripped, JPEG quality 90.
public enum RenderImage {
    public static func normalize(_ bytes: Data, quality: Int = 90) throws -> Data {
        try VipsImageRef.decode(bytes).flattenedSRGB().jpeg(quality: quality)
    }
}
