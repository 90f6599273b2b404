/// Lower-case hex without Foundation's `String(format:)`, which costs a formatter per byte:
/// every fal webhook hashes and hex-encodes its body (on both ends, in the bench).
extension Sequence where Element == UInt8 {
    public var hexString: String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(underestimatedCount * 2)
        for byte in self {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}
