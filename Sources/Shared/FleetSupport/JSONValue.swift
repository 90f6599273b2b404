import Foundation

/// Any JSON value, for payloads and results whose shape belongs to one job kind.
public enum JSONValue: Codable, Hashable, Sendable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() { self = .null }
        else if let value = try? container.decode(Bool.self) { self = .bool(value) }
        else if let value = try? container.decode(Double.self) { self = .number(value) }
        else if let value = try? container.decode(String.self) { self = .string(value) }
        else if let value = try? container.decode([JSONValue].self) { self = .array(value) }
        else { self = .object(try container.decode([String: JSONValue].self)) }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    /// Parses JSON text in one pass, nested at most as deep as `JSONDecoder` allows.
    public init(json: String) throws(JSONParseError) {
        try self.init(parsing: json.utf8, maxDepth: 512)
    }

    /// Compact JSON text with sorted keys.
    public var jsonText: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: (try? encoder.encode(self)) ?? Data("null".utf8), as: UTF8.self)
    }

    public var doubleValue: Double? { if case .number(let value) = self { value } else { nil } }

    /// An object's field; nil for a missing field or a value that is not an object.
    public subscript(key: String) -> JSONValue? {
        if case .object(let fields) = self { fields[key] } else { nil }
    }
}

/// Why `JSONValue(parsing:maxDepth:)` refused its input.
public struct JSONParseError: Error, Equatable, CustomStringConvertible {
    public let reason: String
    /// The byte offset where the input stopped making sense.
    public let offset: Int

    public var description: String { "\(reason) at byte \(offset)" }
}

extension JSONValue {
    /// Parses JSON text in one pass and refuses anything nested deeper than `maxDepth` as soon
    /// as it gets there: the work is linear in the input, whatever it holds. (Decoding through
    /// `Decodable` tries each case in turn at every level, which costs about a second for a
    /// kilobyte nested 500 deep.)
    public init(parsing bytes: some Collection<UInt8>, maxDepth: Int) throws(JSONParseError) {
        try self.init(parsing: Array(bytes), maxDepth: maxDepth)
    }

    /// The same for bytes already in an array. Across modules the generic form runs unspecialised,
    /// copying its input a byte at a time through the protocol; a caller that can copy its
    /// bytes whole (a `ByteBuffer`'s, in one `memcpy`) passes the array.
    public init(parsing bytes: [UInt8], maxDepth: Int) throws(JSONParseError) {
        var parser = JSONTextParser(bytes: bytes, maxDepth: maxDepth)
        self = try parser.document()
    }
}

/// RFC 8259, recursive descent over the bytes; recursion is bounded by `maxDepth`.
private struct JSONTextParser {
    let bytes: [UInt8]
    let maxDepth: Int
    var index = 0

    init(bytes: [UInt8], maxDepth: Int) {
        self.bytes = bytes
        self.maxDepth = maxDepth
    }

    mutating func document() throws(JSONParseError) -> JSONValue {
        let value = try self.value(depth: 0)
        skipWhitespace()
        guard index == bytes.count else { throw fail("unexpected text after the value") }
        return value
    }

    private mutating func value(depth: Int) throws(JSONParseError) -> JSONValue {
        skipWhitespace()
        guard index < bytes.count else { throw fail("unexpected end of input") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try object(depth: depth + 1)
        case UInt8(ascii: "["): return try array(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try number())
        default: throw fail("unexpected character")
        }
    }

    private mutating func object(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth <= maxDepth else { throw fail("nested deeper than \(maxDepth) levels") }
        index += 1
        var fields: [String: JSONValue] = [:]
        skipWhitespace()
        if consume(UInt8(ascii: "}")) { return .object(fields) }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw fail("expected a field name") }
            let key = try string()
            skipWhitespace()
            guard consume(UInt8(ascii: ":")) else { throw fail("expected ':'") }
            fields[key] = try value(depth: depth)
            skipWhitespace()
            if consume(UInt8(ascii: ",")) { continue }
            guard consume(UInt8(ascii: "}")) else { throw fail("expected ',' or '}'") }
            return .object(fields)
        }
    }

    private mutating func array(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth <= maxDepth else { throw fail("nested deeper than \(maxDepth) levels") }
        index += 1
        var items: [JSONValue] = []
        skipWhitespace()
        if consume(UInt8(ascii: "]")) { return .array(items) }
        while true {
            items.append(try value(depth: depth))
            skipWhitespace()
            if consume(UInt8(ascii: ",")) { continue }
            guard consume(UInt8(ascii: "]")) else { throw fail("expected ',' or ']'") }
            return .array(items)
        }
    }

    private mutating func string() throws(JSONParseError) -> String {
        index += 1  // the opening quote
        let firstRun = plainRun()
        var runEnd = firstRun.end
        // Most strings (every key, most values) are ASCII with no escape: made straight from
        // the bytes, with nothing to validate.
        if firstRun.ascii, runEnd < bytes.count, bytes[runEnd] == UInt8(ascii: "\"") {
            let start = index
            index = runEnd + 1
            return bytes.withUnsafeBufferPointer { String(decoding: UnsafeBufferPointer(rebasing: $0[start..<runEnd]), as: UTF8.self) }
        }
        var text: [UInt8] = []
        while true {
            // Bytes that stand for themselves are copied a run at a time: payloads carry long strings.
            text.append(contentsOf: bytes[index..<runEnd])
            index = runEnd
            guard index < bytes.count else { break }
            let byte = bytes[index]
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                guard let string = String(validating: text, as: UTF8.self) else { throw fail("a string is not UTF-8") }
                return string
            case UInt8(ascii: "\\"):
                try escape(into: &text)
            default:
                throw fail("a control character in a string")
            }
            runEnd = plainRun().end
        }
        throw fail("unterminated string")
    }

    /// Where the run of string bytes from `index` ends (at a quote, a backslash or a control
    /// character), and whether every byte of it is ASCII.
    private func plainRun() -> (end: Int, ascii: Bool) {
        bytes.withUnsafeBufferPointer { buffer in
            var end = index
            var bits: UInt8 = 0
            while end < buffer.count {
                let byte = buffer[end]
                if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte < 0x20 { break }
                bits |= byte
                end += 1
            }
            return (end, bits < 0x80)
        }
    }

    private mutating func escape(into text: inout [UInt8]) throws(JSONParseError) {
        guard index < bytes.count else { throw fail("unterminated escape") }
        let byte = bytes[index]
        index += 1
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): text.append(byte)
        case UInt8(ascii: "b"): text.append(0x08)
        case UInt8(ascii: "f"): text.append(0x0C)
        case UInt8(ascii: "n"): text.append(0x0A)
        case UInt8(ascii: "r"): text.append(0x0D)
        case UInt8(ascii: "t"): text.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = try hex4()
            if (0xD800..<0xDC00).contains(scalar) {
                // A high surrogate must be followed by an escaped low one.
                guard consume(UInt8(ascii: "\\")), consume(UInt8(ascii: "u")) else { throw fail("a lone surrogate") }
                let low = try hex4()
                guard (0xDC00..<0xE000).contains(low) else { throw fail("a lone surrogate") }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            }
            guard let unicode = Unicode.Scalar(scalar) else { throw fail("a lone surrogate") }
            text.append(contentsOf: Array(String(Character(unicode)).utf8))
        default:
            throw fail("an unknown escape")
        }
    }

    private mutating func hex4() throws(JSONParseError) -> UInt32 {
        guard index + 4 <= bytes.count else { throw fail("a short \\u escape") }
        var value: UInt32 = 0
        for byte in bytes[index..<index + 4] {
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw fail("a bad \\u escape")
            }
            value = value << 4 | UInt32(digit)
        }
        index += 4
        return value
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`, checked, then read by Double.
    private mutating func number() throws(JSONParseError) -> Double {
        let start = index
        _ = consume(UInt8(ascii: "-"))
        if consume(UInt8(ascii: "0")) {
            // No leading zeros.
        } else if digits() == 0 {
            throw fail("a number without digits")
        }
        if consume(UInt8(ascii: ".")), digits() == 0 { throw fail("a number without digits after '.'") }
        if consume(UInt8(ascii: "e")) || consume(UInt8(ascii: "E")) {
            if !consume(UInt8(ascii: "+")) { _ = consume(UInt8(ascii: "-")) }
            guard digits() > 0 else { throw fail("an exponent without digits") }
        }
        guard let number = Double(String(decoding: bytes[start..<index], as: UTF8.self)), number.isFinite else {
            throw fail("a number out of range")
        }
        return number
    }

    private mutating func digits() -> Int {
        let start = index
        while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
        return index - start
    }

    private mutating func literal(_ word: String) throws(JSONParseError) {
        let expected = Array(word.utf8)
        guard bytes.count - index >= expected.count, Array(bytes[index..<index + expected.count]) == expected else {
            throw fail("unexpected character")
        }
        index += expected.count
    }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    private mutating func consume(_ byte: UInt8) -> Bool {
        guard index < bytes.count, bytes[index] == byte else { return false }
        index += 1
        return true
    }

    private func fail(_ reason: String) -> JSONParseError { JSONParseError(reason: reason, offset: index) }
}
