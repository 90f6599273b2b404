extension Array where Element == UInt8 {
    /// Appends `text` as a JSON string literal: quotes and backslashes escaped, newlines, returns
    /// and tabs by their short forms, other control characters as `\u00XX`. The JSON the fleet
    /// writes by hand (log lines, trace exports) quotes its strings here.
    public mutating func appendJSONString(_ text: String) {
        append(UInt8(ascii: "\""))
        defer { append(UInt8(ascii: "\"")) }
        // Most text needs no escape: appended whole rather than a byte at a time.
        guard text.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) else {
            return append(contentsOf: text.utf8)
        }
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"): append(contentsOf: [UInt8(ascii: "\\"), byte])
            case UInt8(ascii: "\n"): append(contentsOf: "\\n".utf8)
            case UInt8(ascii: "\r"): append(contentsOf: "\\r".utf8)
            case UInt8(ascii: "\t"): append(contentsOf: "\\t".utf8)
            case 0..<0x20:
                append(contentsOf: "\\u00".utf8)
                append(contentsOf: [byte].hexString.utf8)
            default: append(byte)
            }
        }
    }
}
