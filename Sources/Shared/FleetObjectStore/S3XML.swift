import Foundation

/// The few elements the fleet reads from S3's XML answers (errors, ListObjectsV2, DeleteObjects)
/// and writes in its requests. These documents are flat and their element names fixed, so a
/// scan for `<Name>…</Name>` reads them without an XML parser (FoundationXML would bring libxml2
/// into every worker for three tags).
enum S3XML {
    /// The text of the first `<name>` element in `xml`, entities decoded; nil when there is none.
    static func value(of name: String, in xml: some StringProtocol) -> String? {
        elements(name, in: xml).first.map { decoded($0) }
    }

    /// The raw content of every `<name>…</name>` in `xml`, in order (not nested in each other).
    static func elements(_ name: String, in xml: some StringProtocol) -> [Substring] {
        let text = Substring(xml)
        let open = "<\(name)>", close = "</\(name)>"
        var found: [Substring] = []
        var rest = text[...]
        while let start = rest.range(of: open), let end = rest[start.upperBound...].range(of: close) {
            found.append(rest[start.upperBound..<end.lowerBound])
            rest = rest[end.upperBound...]
        }
        return found
    }

    /// XML's five entities and numeric references, as S3 escapes keys and messages.
    static func decoded(_ text: Substring) -> String {
        guard text.contains("&") else { return String(text) }
        var result = ""
        var rest = text
        while let ampersand = rest.firstIndex(of: "&") {
            result += rest[..<ampersand]
            guard let semicolon = rest[ampersand...].firstIndex(of: ";") else { break }
            let entity = rest[rest.index(after: ampersand)..<semicolon]
            switch entity {
            case "amp": result += "&"
            case "lt": result += "<"
            case "gt": result += ">"
            case "quot": result += "\""
            case "apos": result += "'"
            default:
                let number = entity.hasPrefix("#x") ? UInt32(entity.dropFirst(2), radix: 16) : entity.hasPrefix("#") ? UInt32(entity.dropFirst()) : nil
                if let scalar = number.flatMap(Unicode.Scalar.init) { result.unicodeScalars.append(scalar) } else { result += "&\(entity);" }
            }
            rest = rest[rest.index(after: semicolon)...]
        }
        return result + rest
    }

    /// `text` with `&`, `<`, `>` escaped, for a key inside a request body.
    static func escaped(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;")
    }
}
