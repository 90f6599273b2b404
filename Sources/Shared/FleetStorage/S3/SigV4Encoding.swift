/// Percent-encoding as AWS Signature V4 wants it (the "UriEncode" of the S3 signature docs),
/// stricter than RFC 3986's sets in Foundation: only `A-Z a-z 0-9 - . _ ~` stay as they are,
/// every other byte of the UTF-8 becomes `%XY` with upper-case hex, and a space is `%20` (never
/// `+`). The same text must go on the wire as was signed, so the URL is built from these too.
public enum SigV4Encoding {
    /// A query name or value: `/` is encoded too.
    public static func component(_ text: String) -> String {
        encode(text, keepingSlash: false)
    }

    /// An object path: each `/` stays (S3 paths are encoded once, not twice as other services').
    public static func path(_ text: String) -> String {
        encode(text, keepingSlash: true)
    }

    /// A query as SigV4 signs it and the URL must carry it: names and values encoded, sorted by
    /// name then value, joined by `&` (`prefix=a%2F&list-type=2`; an empty value keeps its `=`).
    public static func canonicalQuery(_ query: [(name: String, value: String)]) -> String {
        let encoded: [(name: String, value: String)] = query.map { (component($0.name), component($0.value)) }
        let sorted = encoded.sorted { (left, right) -> Bool in
            left.name == right.name ? left.value < right.value : left.name < right.name
        }
        return sorted.map { $0.name + "=" + $0.value }.joined(separator: "&")
    }

    private static func encode(_ text: String, keepingSlash: Bool) -> String {
        var encoded = [UInt8]()
        encoded.reserveCapacity(text.utf8.count)
        let hex = Array("0123456789ABCDEF".utf8)
        for byte in text.utf8 {
            if isUnreserved(byte) || (keepingSlash && byte == UInt8(ascii: "/")) {
                encoded.append(byte)
            } else {
                encoded.append(contentsOf: [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]])
            }
        }
        return String(decoding: encoded, as: UTF8.self)
    }

    private static func isUnreserved(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
             UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
            true
        default:
            false
        }
    }
}
