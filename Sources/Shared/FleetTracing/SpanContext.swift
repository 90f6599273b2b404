import FleetSupport
import Tracing

/// A trace's 16-byte id, as two big-endian halves (W3C: never all zero).
public struct TraceID: Hashable, Sendable {
    public let high: UInt64
    public let low: UInt64

    public init?(high: UInt64, low: UInt64) {
        guard high != 0 || low != 0 else { return nil }
        self.high = high
        self.low = low
    }

    /// Its 16 bytes, most significant first, as OTLP's protobuf carries them.
    public var bytes: [UInt8] { bigEndianBytes(high) + bigEndianBytes(low) }
    public var hex: String { bytes.hexString }
}

/// A span's 8-byte id (W3C: never all zero).
public struct SpanID: Hashable, Sendable {
    public let value: UInt64

    public init?(_ value: UInt64) {
        guard value != 0 else { return nil }
        self.value = value
    }

    public var bytes: [UInt8] { bigEndianBytes(value) }
    public var hex: String { bytes.hexString }
}

private func bigEndianBytes(_ value: UInt64) -> [UInt8] { withUnsafeBytes(of: value.bigEndian, Array.init) }

/// What a span is known by, within its process and across: its trace, its own id, its flags
/// (bit 0: sampled) and, from a caller, the vendors' `tracestate`. It rides in the span's
/// `ServiceContext`, where the tracer reads a parent's and the log metadata provider the current one.
public struct SpanContext: Hashable, Sendable {
    public let traceID: TraceID
    public let spanID: SpanID
    public let flags: UInt8
    public let traceState: String?

    public init(traceID: TraceID, spanID: SpanID, flags: UInt8, traceState: String? = nil) {
        self.traceID = traceID
        self.spanID = spanID
        self.flags = flags
        self.traceState = traceState
    }

    public var isSampled: Bool { flags & 1 == 1 }

    /// `00-<trace id>-<span id>-<flags>`.
    public var traceParent: String { "00-\(traceID.hex)-\(spanID.hex)-\([flags].hexString)" }

    /// A W3C traceparent of version 00, lower-case hex, ids not all zero; nil for anything else
    /// (a caller's malformed header starts a new trace rather than failing its request).
    public init?(traceParent: String, traceState: String? = nil) {
        let fields = traceParent.utf8.split(separator: UInt8(ascii: "-"), omittingEmptySubsequences: false)
        guard fields.count == 4, fields.allSatisfy({ $0.allSatisfy(Self.isLowerHex) }),
              fields[0].elementsEqual("00".utf8), fields[1].count == 32, fields[2].count == 16, fields[3].count == 2,
              let high = UInt64(Substring(fields[1].prefix(16)), radix: 16), let low = UInt64(Substring(fields[1].suffix(16)), radix: 16),
              let traceID = TraceID(high: high, low: low),
              let span = UInt64(Substring(fields[2]), radix: 16), let spanID = SpanID(span),
              let flags = UInt8(Substring(fields[3]), radix: 16)
        else { return nil }
        self.init(traceID: traceID, spanID: spanID, flags: flags, traceState: traceState.flatMap { $0.isEmpty ? nil : $0 })
    }

    private static func isLowerHex(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
    }
}

private enum SpanContextKey: ServiceContextKey {
    typealias Value = SpanContext
}

extension ServiceContext {
    /// The span this context belongs to: the current span's, or a caller's extracted from its
    /// traceparent; nil outside any trace.
    public var spanContext: SpanContext? {
        get { self[SpanContextKey.self] }
        set { self[SpanContextKey.self] = newValue }
    }
}
