import Foundation

/// Protobuf's wire format, by hand for the few field types OTLP's traces use: a tag (field number
/// and wire type) before each value; varints, little-endian fixed64/fixed32, and length-delimited
/// strings, bytes and nested messages.
struct ProtobufWriter: OTLPWriter {
    private(set) var bytes: [UInt8] = []

    private enum WireType: UInt64 {
        case varint = 0, fixed64 = 1, lengthDelimited = 2, fixed32 = 5
    }

    mutating func message(_ field: Field, repeated: Bool, _ body: (inout Self) -> Void) {
        tag(field, .lengthDelimited)
        // The body is written in place, then its length put before it: the length of a message
        // is known only once it is written, and each level moves its bytes once.
        let start = bytes.count
        body(&self)
        var length = ProtobufWriter()
        length.varint(UInt64(bytes.count - start))
        bytes.insert(contentsOf: length.bytes, at: start)
    }

    mutating func each<Items: Collection>(_ field: Field, _ items: Items, _ body: (inout Self, Items.Element) -> Void) {
        for item in items { message(field, repeated: true) { body(&$0, item) } }
    }

    mutating func string(_ field: Field, _ value: String) {
        guard !value.isEmpty else { return }
        lengthDelimited(field, Array(value.utf8))
    }

    mutating func id(_ field: Field, _ bytes: [UInt8]) { lengthDelimited(field, bytes) }

    mutating func enumeration(_ field: Field, _ value: Int) {
        guard value != 0 else { return }
        tag(field, .varint)
        varint(UInt64(value))
    }

    mutating func fixed64(_ field: Field, _ value: UInt64) {
        guard value != 0 else { return }
        tag(field, .fixed64)
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    mutating func fixed32(_ field: Field, _ value: UInt32) {
        guard value != 0 else { return }
        tag(field, .fixed32)
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    /// int64 is a varint of the two's complement (a negative number takes ten bytes).
    mutating func int64(_ field: Field, _ value: Int64) {
        guard value != 0 else { return }
        tag(field, .varint)
        varint(UInt64(bitPattern: value))
    }

    mutating func bool(_ field: Field, _ value: Bool) {
        guard value else { return }
        tag(field, .varint)
        varint(1)
    }

    mutating func double(_ field: Field, _ value: Double) {
        guard value != 0 else { return }
        tag(field, .fixed64)
        withUnsafeBytes(of: value.bitPattern.littleEndian) { bytes.append(contentsOf: $0) }
    }

    func finished() -> Data { Data(bytes) }

    private mutating func lengthDelimited(_ field: Field, _ value: [UInt8]) {
        tag(field, .lengthDelimited)
        varint(UInt64(value.count))
        bytes.append(contentsOf: value)
    }

    private mutating func tag(_ field: Field, _ type: WireType) { varint(UInt64(field.number) << 3 | type.rawValue) }

    private mutating func varint(_ value: UInt64) {
        var value = value
        while value >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
    }
}
