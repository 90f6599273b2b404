import FleetSupport
import Foundation

/// OTLP/JSON: protobuf's JSON mapping with OTLP's exceptions (ids as hex, enums as integers);
/// 64-bit integers as strings, field names in lowerCamelCase, default values left out.
struct JSONWriter: OTLPWriter {
    private var text: [UInt8] = [UInt8(ascii: "{")]
    /// Whether the next key or array element needs a comma before it.
    private var separated = false

    mutating func message(_ field: Field, repeated: Bool, _ body: (inout Self) -> Void) {
        key(field)
        if repeated { open("[") }
        object(body)
        if repeated { close("]") }
    }

    mutating func each<Items: Collection>(_ field: Field, _ items: Items, _ body: (inout Self, Items.Element) -> Void) {
        guard !items.isEmpty else { return }
        key(field)
        open("[")
        for item in items {
            if separated { text.append(UInt8(ascii: ",")) }
            object { body(&$0, item) }
        }
        close("]")
    }

    mutating func string(_ field: Field, _ value: String) {
        guard !value.isEmpty else { return }
        key(field)
        quoted(value)
    }

    mutating func traceID(_ field: Field, _ id: TraceID) { string(field, id.hex) }
    mutating func spanID(_ field: Field, _ id: SpanID) { string(field, id.hex) }

    mutating func enumeration(_ field: Field, _ value: Int) { integer(field, value, quoted: false) }
    mutating func fixed64(_ field: Field, _ value: UInt64) { integer(field, value, quoted: true) }
    mutating func fixed32(_ field: Field, _ value: UInt32) { integer(field, value, quoted: false) }
    mutating func int64(_ field: Field, _ value: Int64) { integer(field, value, quoted: true) }

    mutating func bool(_ field: Field, _ value: Bool) {
        guard value else { return }
        raw(field, "true")
    }

    /// Infinities and NaN are strings in protobuf's JSON mapping.
    mutating func double(_ field: Field, _ value: Double) {
        guard value != 0 else { return }
        if value.isFinite { raw(field, "\(value)") } else { string(field, value.isNaN ? "NaN" : value < 0 ? "-Infinity" : "Infinity") }
    }

    func finished() -> Data { Data(text + [UInt8(ascii: "}")]) }

    private mutating func object(_ body: (inout Self) -> Void) {
        open("{")
        body(&self)
        close("}")
    }

    private mutating func open(_ bracket: Unicode.Scalar) {
        text.append(UInt8(ascii: bracket))
        separated = false
    }

    private mutating func close(_ bracket: Unicode.Scalar) {
        text.append(UInt8(ascii: bracket))
        separated = true
    }

    private mutating func key(_ field: Field) {
        if separated { text.append(UInt8(ascii: ",")) }
        quoted(field.name)
        text.append(UInt8(ascii: ":"))
        separated = true
    }

    /// 64-bit integers are quoted (a JavaScript number holds 53 bits), others are bare.
    private mutating func integer(_ field: Field, _ value: some BinaryInteger, quoted: Bool) {
        guard value != 0 else { return }
        if quoted { string(field, String(value)) } else { raw(field, String(value)) }
    }

    private mutating func raw(_ field: Field, _ value: String) {
        key(field)
        text.append(contentsOf: value.utf8)
    }

    private mutating func quoted(_ value: String) { text.appendJSONString(value) }
}
