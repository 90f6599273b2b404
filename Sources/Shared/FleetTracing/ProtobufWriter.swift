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
        // A message's length is known once it is written: one byte is kept for it (most of the
        // messages here are shorter than 128 bytes), and a longer one moves its bytes over once
        // for the rest of the varint.
        let lengthAt = bytes.count
        bytes.append(0)
        body(&self)
        var length = bytes.count - lengthAt - 1
        let extra = (Int.bitWidth - length.leadingZeroBitCount - 1) / 7
        if extra > 0 { bytes.insert(contentsOf: repeatElement(0, count: extra), at: lengthAt + 1) }
        for index in lengthAt...(lengthAt + extra) {
            bytes[index] = UInt8(truncatingIfNeeded: length) | (index < lengthAt + extra ? 0x80 : 0)
            length >>= 7
        }
    }

    mutating func each<Items: Collection>(_ field: Field, _ items: Items, _ body: (inout Self, Items.Element) -> Void) {
        for item in items { message(field, repeated: true) { body(&$0, item) } }
    }

    mutating func string(_ field: Field, _ value: String) {
        guard !value.isEmpty else { return }
        tag(field, .lengthDelimited)
        varint(UInt64(value.utf8.count))
        bytes.append(contentsOf: value.utf8)
    }

    /// Ids are bytes, most significant first.
    mutating func traceID(_ field: Field, _ id: TraceID) {
        tag(field, .lengthDelimited)
        varint(16)
        append(id.high.bigEndian)
        append(id.low.bigEndian)
    }

    mutating func spanID(_ field: Field, _ id: SpanID) {
        tag(field, .lengthDelimited)
        varint(8)
        append(id.value.bigEndian)
    }

    mutating func enumeration(_ field: Field, _ value: Int) {
        guard value != 0 else { return }
        tag(field, .varint)
        varint(UInt64(value))
    }

    mutating func fixed64(_ field: Field, _ value: UInt64) {
        guard value != 0 else { return }
        tag(field, .fixed64)
        append(value.littleEndian)
    }

    mutating func fixed32(_ field: Field, _ value: UInt32) {
        guard value != 0 else { return }
        tag(field, .fixed32)
        append(value.littleEndian)
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
        append(value.bitPattern.littleEndian)
    }

    func finished() -> Data { Data(bytes) }

    /// The value's bytes as they are in memory (the caller picks the byte order).
    private mutating func append(_ value: some FixedWidthInteger) { withUnsafeBytes(of: value) { bytes.append(contentsOf: $0) } }

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
