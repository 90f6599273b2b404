import DispatcherProtocol
import FleetSupport
import Foundation
import Testing

/// The dispatcher decodes every request's arguments from the parsed frame (`JSONValueDecoder`)
/// instead of through JSON text: it must decode what `JSONDecoder` decodes, refuse what it refuses
/// with the same kind of error at the same path, and name the fields no decoding asked for.
@Suite struct JSONValueDecoderTests {
    struct Sample: Codable, Equatable {
        enum Size: String, Codable { case small, large }
        struct Part: Codable, Equatable {
            let name: String
            let count: Int?
        }
        let id: Int64
        let ratio: Double
        let flag: Bool
        let size: Size
        let at: Date
        let parts: [Part]
        let tags: [String: Int]
        let payload: JSONValue
        let note: String?
    }

    static let sample = #"""
        {"id":42,"ratio":0.5,"flag":true,"size":"large","at":"2026-11-28T19:00:00.123Z",
         "parts":[{"name":"a","count":1},{"name":"b","count":null}],"tags":{"x":1,"y":2},
         "payload":{"deep":[1,{"k":"v"}]},"note":null}
        """#

    func fromValue<T: Decodable>(_ type: T.Type, _ json: String) throws -> (value: T, unreadFields: [String]) {
        try JSONValueDecoder(parseDate: WireFormat.parseDate).decode(T.self, from: try JSONValue(json: json), root: "args")
    }

    func fromText<T: Decodable>(_ type: T.Type, _ json: String) throws -> T {
        try WireFormat.makeDecoder().decode(T.self, from: Data(json.utf8))
    }

    /// An error's kind and where: `keyNotFound id at `, `typeMismatch at parts.0`.
    func summary(_ body: () throws -> Any) -> String {
        do {
            _ = try body()
            return "decoded"
        } catch let error as DecodingError {
            func path(_ context: DecodingError.Context) -> String {
                context.codingPath.map { $0.intValue.map(String.init) ?? $0.stringValue }.joined(separator: ".")
            }
            switch error {
            case .keyNotFound(let key, let context): return "keyNotFound \(key.stringValue) at \(path(context))"
            case .typeMismatch(_, let context): return "typeMismatch at \(path(context))"
            case .valueNotFound(_, let context): return "valueNotFound at \(path(context))"
            case .dataCorrupted(let context): return "dataCorrupted at \(path(context))"
            @unknown default: return "\(error)"
            }
        } catch {
            return "\(error)"
        }
    }

    @Test func decodesWhatJSONDecoderDecodesAndReadsEveryFieldOfIt() throws {
        let decoded = try fromValue(Sample.self, Self.sample)
        #expect(decoded.value == (try fromText(Sample.self, Self.sample)))
        #expect(decoded.unreadFields == [])
    }

    @Test func namesTheFieldsNoDecodingAskedForButNotNullsNorWhatIsInsideAJSONValue() throws {
        let json = Self.sample
            .replacingOccurrences(of: #"{"name":"b","count":null}"#, with: #"{"name":"b","count":null,"colour":"red"}"#)
            .replacingOccurrences(of: #""note":null}"#, with: #""note":null,"extra":{"a":1},"unset":null,"zero":0}"#)
        #expect(try fromValue(Sample.self, json).unreadFields == ["args.extra", "args.parts[1].colour", "args.zero"])
    }

    @Test func refusesWhatJSONDecoderRefusesWithTheSameErrorAtTheSamePath() {
        let replacements = [
            (#""id":42,"#, ""),
            (#""id":42"#, #""id":"42""#),
            (#""id":42"#, #""id":null"#),
            (#""flag":true"#, #""flag":1"#),
            (#""size":"large""#, #""size":"medium""#),
            (#""at":"2026-11-28T19:00:00.123Z""#, #""at":"yesterday""#),
            (#""at":"2026-11-28T19:00:00.123Z""#, #""at":12"#),
            (#"{"name":"a","count":1}"#, #"{"count":1}"#),
            (#"{"name":"a","count":1}"#, #"{"name":"a","count":"one"}"#),
            (#"[{"name":"a","count":1},{"name":"b","count":null}]"#, #"{"name":"a"}"#),
            (#""tags":{"x":1,"y":2}"#, #""tags":{"x":"one"}"#),
            (#""tags":{"x":1,"y":2}"#, #""tags":[1]"#),
        ]
        for (original, replacement) in replacements {
            let json = Self.sample.replacingOccurrences(of: original, with: replacement)
            #expect(json != Self.sample)
            let expected = summary { try fromText(Sample.self, json) }
            #expect(expected != "decoded", "\(replacement)")
            #expect(summary { try fromValue(Sample.self, json) } == expected, "\(replacement)")
        }
        #expect(summary { try fromValue(Sample.self, "[1]") } == summary { try fromText(Sample.self, "[1]") })
        // A number that does not fit its integer type: `JSONDecoder` says so with an empty path
        // (`args: not a valid value` on the wire), this decoder at the field.
        for number in ["4.5", "1e300", "-1e19"] {
            let json = Self.sample.replacingOccurrences(of: #""id":42"#, with: #""id":\#(number)"#)
            #expect(summary { try fromText(Sample.self, json) } == "dataCorrupted at ")
            #expect(summary { try fromValue(Sample.self, json) } == "dataCorrupted at id")
        }
    }
}
