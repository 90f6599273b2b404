import FleetSupport
import Testing

/// `JSONValue(parsing:)`'s strings: the ASCII fast path and the general path (escapes, other
/// scripts, validation) give the same strings and refuse the same input.
@Suite struct JSONTextParserTests {
    private func string(_ json: some Collection<UInt8>) throws -> String? {
        guard case .object(let fields) = try JSONValue(parsing: json, maxDepth: 8), case .string(let value)? = fields["k"] else { return nil }
        return value
    }

    @Test func plainASCIIStringsAndKeys() throws {
        #expect(try string(Array(#"{"k":"render.run"}"#.utf8)) == "render.run")
        #expect(try string(Array(#"{"k":""}"#.utf8)) == "")
        #expect(try JSONValue(parsing: Array(#"{"kind":"a","payload":{"x":"y"}}"#.utf8), maxDepth: 8)
            == .object(["kind": .string("a"), "payload": .object(["x": .string("y")])]))
    }

    @Test func otherScriptsAndEscapesTakeTheGeneralPath() throws {
        #expect(try string(Array(#"{"k":"robe d'été ✨"}"#.utf8)) == "robe d'été ✨")
        #expect(try string(Array(#"{"k":"a\nb\"c\\d\/e"}"#.utf8)) == "a\nb\"c\\d/e")
        #expect(try string(Array(#"{"k":"caf\u00e9 \ud83d\ude00 x"}"#.utf8)) == "café 😀 x")
        // An escape after an ASCII run, and non-ASCII after an escape.
        #expect(try string(Array(#"{"k":"abc\tdé"}"#.utf8)) == "abc\tdé")
    }

    @Test func badStringsAreRefused() {
        // Invalid UTF-8 in an otherwise plain string: the fast path must not take it.
        let invalid: [UInt8] = Array(#"{"k":"ab"#.utf8) + [0xC3, 0x28] + Array(#""}"#.utf8)
        #expect(throws: JSONParseError.self) { try JSONValue(parsing: invalid, maxDepth: 8) }
        let lone: [UInt8] = Array(#"{"k":""#.utf8) + [0xFF] + Array(#""}"#.utf8)
        #expect(throws: JSONParseError.self) { try JSONValue(parsing: lone, maxDepth: 8) }
        #expect(throws: JSONParseError.self) { try JSONValue(parsing: Array("{\"k\":\"a\u{01}b\"}".utf8), maxDepth: 8) }
        #expect(throws: JSONParseError.self) { try JSONValue(parsing: Array(#"{"k":"abc"#.utf8), maxDepth: 8) }
        #expect(throws: JSONParseError.self) { try JSONValue(parsing: Array(#"{"k":"\ud83d x"}"#.utf8), maxDepth: 8) }
    }

    /// `appendJSONString` (the plain whole, the rest escaped) and the parser agree both ways.
    @Test func writtenStringsParseBack() throws {
        for text in ["render.run", "", "robe d'été ✨", "a\nb\"c\\d", "tab\there", "\u{01}\u{1F}x"] {
            var json = Array(#"{"k":"#.utf8)
            json.appendJSONString(text)
            json.append(UInt8(ascii: "}"))
            #expect(try string(json) == text, "\(text.debugDescription)")
        }
        var plain: [UInt8] = []
        plain.appendJSONString("abc")
        #expect(plain == Array(#""abc""#.utf8))
        var escaped: [UInt8] = []
        escaped.appendJSONString("a\"\u{01}")
        #expect(escaped == Array(#""a\"\u0001""#.utf8))
    }
}
