import Foundation
import Tracing

/// An OTLP `ExportTraceServiceRequest` (opentelemetry-proto, `collector/trace/v1`), written once
/// for both wire formats: the walk over the spans is here, and an `OTLPWriter` puts each field
/// down by its number (protobuf) or its name (JSON).
public struct OTLPTraceRequest {
    /// Resource attributes: `service.name` and `OTEL_RESOURCE_ATTRIBUTES`'s.
    public let resource: [(key: String, value: String)]
    public let spans: [SpanRecord]

    public init(resource: [(key: String, value: String)], spans: [SpanRecord]) {
        self.resource = resource
        self.spans = spans
    }

    /// The instrumentation scope every span is reported under.
    static let scopeName = "wearbloom-fleet"

    public func encoded(as format: OTLPFormat) -> Data {
        switch format {
        case .protobuf: encoded(by: ProtobufWriter())
        case .json: encoded(by: JSONWriter())
        }
    }

    private func encoded<Writer: OTLPWriter>(by writer: Writer) -> Data {
        var writer = writer
        // ExportTraceServiceRequest.resource_spans = 1: one resource, one scope.
        writer.message(Field(1, "resourceSpans"), repeated: true) { w in
            w.message(Field(1, "resource")) { w in
                w.each(Field(1, "attributes"), resource) { w, attribute in
                    w.keyValue(attribute.key) { $0.string(Field(1, "stringValue"), attribute.value) }
                }
            }
            w.message(Field(2, "scopeSpans"), repeated: true) { w in
                w.message(Field(1, "scope")) { $0.string(Field(1, "name"), Self.scopeName) }
                w.each(Field(2, "spans"), spans) { w, record in Self.span(record, into: &w) }
            }
        }
        return writer.finished()
    }

    private static func span<Writer: OTLPWriter>(_ record: SpanRecord, into w: inout Writer) {
        let span = record.snapshot
        w.traceID(Field(1, "traceId"), record.context.traceID)
        w.spanID(Field(2, "spanId"), record.context.spanID)
        if let traceState = record.context.traceState { w.string(Field(3, "traceState"), traceState) }
        if let parent = record.parentSpanID { w.spanID(Field(4, "parentSpanId"), parent) }
        w.string(Field(5, "name"), span.name)
        w.enumeration(Field(6, "kind"), kindNumber(record.kind))
        w.fixed64(Field(7, "startTimeUnixNano"), record.start)
        w.fixed64(Field(8, "endTimeUnixNano"), span.end ?? record.start)
        attributes(span.attributes, field: Field(9, "attributes"), into: &w)
        w.each(Field(11, "events"), span.events) { w, event in
            w.fixed64(Field(1, "timeUnixNano"), event.nanosecondsSinceEpoch)
            w.string(Field(2, "name"), event.name)
            attributes(event.attributes, field: Field(3, "attributes"), into: &w)
        }
        w.each(Field(13, "links"), span.links) { w, link in
            w.traceID(Field(1, "traceId"), link.context.traceID)
            w.spanID(Field(2, "spanId"), link.context.spanID)
            if let traceState = link.context.traceState { w.string(Field(3, "traceState"), traceState) }
            attributes(link.attributes, field: Field(4, "attributes"), into: &w)
        }
        if let status = span.status {
            w.message(Field(15, "status")) { w in
                if let message = status.message { w.string(Field(2, "message"), message) }
                w.enumeration(Field(3, "code"), status.code == .ok ? 1 : 2)
            }
        }
        // The W3C flags (sampled), in the proto since 1.1; older collectors skip the field.
        w.fixed32(Field(16, "flags"), UInt32(record.context.flags))
    }

    /// common.v1.SpanKind: unspecified is 0.
    private static func kindNumber(_ kind: SpanKind) -> Int {
        switch kind {
        case .internal: 1
        case .server: 2
        case .client: 3
        case .producer: 4
        case .consumer: 5
        }
    }

    private static func attributes<Writer: OTLPWriter>(_ attributes: SpanAttributes, field: Field, into w: inout Writer) {
        var all: [(String, SpanAttribute)] = []
        all.reserveCapacity(attributes.count)
        attributes.forEach { all.append(($0, $1)) }
        w.each(field, all) { w, attribute in
            w.keyValue(attribute.0) { anyValue(attribute.1, into: &$0) }
        }
    }

    /// common.v1.AnyValue: one field of the oneof set.
    private static func anyValue<Writer: OTLPWriter>(_ value: SpanAttribute, into w: inout Writer) {
        switch value {
        case .string(let text): w.string(Field(1, "stringValue"), text)
        case .bool(let flag): w.bool(Field(2, "boolValue"), flag)
        case .int32(let number): w.int64(Field(3, "intValue"), Int64(number))
        case .int64(let number): w.int64(Field(3, "intValue"), number)
        case .double(let number): w.double(Field(4, "doubleValue"), number)
        case .stringConvertible(let value): w.string(Field(1, "stringValue"), value.description)
        case .stringArray(let values): array(values.map(SpanAttribute.string), into: &w)
        case .boolArray(let values): array(values.map(SpanAttribute.bool), into: &w)
        case .int32Array(let values): array(values.map(SpanAttribute.int32), into: &w)
        case .int64Array(let values): array(values.map(SpanAttribute.int64), into: &w)
        case .doubleArray(let values): array(values.map(SpanAttribute.double), into: &w)
        case .stringConvertibleArray(let values): array(values.map { .string($0.description) }, into: &w)
        default: w.string(Field(1, "stringValue"), "\(value)")
        }
    }

    /// AnyValue.array_value = 5, an ArrayValue whose values = 1.
    private static func array<Writer: OTLPWriter>(_ values: [SpanAttribute], into w: inout Writer) {
        w.message(Field(5, "arrayValue")) { w in
            w.each(Field(1, "values"), values) { w, value in anyValue(value, into: &w) }
        }
    }
}

/// The two encodings OTLP/HTTP takes (`OTEL_EXPORTER_OTLP_PROTOCOL`).
public enum OTLPFormat: String, Sendable {
    case protobuf = "http/protobuf"
    case json = "http/json"

    public var contentType: String {
        switch self {
        case .protobuf: "application/x-protobuf"
        case .json: "application/json"
        }
    }
}

/// A message field: its number in the .proto, its name in OTLP/JSON (lowerCamelCase).
struct Field {
    let number: Int
    let name: String

    init(_ number: Int, _ name: String) {
        self.number = number
        self.name = name
    }
}

/// Puts fields down in one wire format. Default values (empty strings, zero) are left out, as
/// proto3 does.
protocol OTLPWriter {
    /// A nested message; `repeated` when the field is (JSON wraps a repeated field in an array).
    mutating func message(_ field: Field, repeated: Bool, _ body: (inout Self) -> Void)
    /// A repeated message field, one message each.
    mutating func each<Items: Collection>(_ field: Field, _ items: Items, _ body: (inout Self, Items.Element) -> Void)
    mutating func string(_ field: Field, _ value: String)
    /// Trace and span ids: bytes in protobuf, hex in JSON.
    mutating func traceID(_ field: Field, _ id: TraceID)
    mutating func spanID(_ field: Field, _ id: SpanID)
    mutating func enumeration(_ field: Field, _ value: Int)
    mutating func fixed64(_ field: Field, _ value: UInt64)
    mutating func fixed32(_ field: Field, _ value: UInt32)
    mutating func int64(_ field: Field, _ value: Int64)
    mutating func bool(_ field: Field, _ value: Bool)
    mutating func double(_ field: Field, _ value: Double)
    /// The document so far, completed.
    func finished() -> Data
}

extension OTLPWriter {
    mutating func message(_ field: Field, _ body: (inout Self) -> Void) { message(field, repeated: false, body) }

    /// common.v1.KeyValue: key = 1, value = 2 (an AnyValue).
    mutating func keyValue(_ key: String, _ value: (inout Self) -> Void) {
        string(Field(1, "key"), key)
        message(Field(2, "value"), value)
    }
}
