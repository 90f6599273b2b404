/// A W3C `traceparent` (https://www.w3.org/TR/trace-context/#traceparent-header): the optional
/// `traceparent` field of any request frame, so a request joins its caller's trace. Checked
/// here, once, by client and server alike: a malformed one is refused (`BAD_ARGUMENT`) rather
/// than silently starting a new trace.
public struct TraceParent: Codable, Hashable, Sendable, CustomStringConvertible {
    /// `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`, lowercase.
    public let rawValue: String

    /// Why a text is not a traceparent.
    public struct FormatError: Error, Equatable, CustomStringConvertible {
        public let text: String
        public let reason: String
        public var description: String {
            "traceparent '\(text.prefix(80))' is not a W3C traceparent (00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>): \(reason)"
        }
    }

    public init(_ text: String) throws(FormatError) {
        func fail(_ reason: String) -> FormatError { FormatError(text: text, reason: reason) }
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 4 else { throw fail("4 fields separated by '-'") }
        let (version, traceID, parentID, flags) = (parts[0], parts[1], parts[2], parts[3])
        guard version == "00" else { throw fail("version must be 00") }
        guard traceID.utf8.count == 32, traceID.utf8.allSatisfy(Self.isLowerHex) else { throw fail("the trace id is 32 lowercase hex digits") }
        guard parentID.utf8.count == 16, parentID.utf8.allSatisfy(Self.isLowerHex) else { throw fail("the parent id is 16 lowercase hex digits") }
        guard flags.utf8.count == 2, flags.utf8.allSatisfy(Self.isLowerHex) else { throw fail("the flags are 2 lowercase hex digits") }
        // All zeros is the spec's "invalid" id, which tracers drop.
        guard traceID.utf8.contains(where: { $0 != UInt8(ascii: "0") }) else { throw fail("the trace id must not be all zeros") }
        guard parentID.utf8.contains(where: { $0 != UInt8(ascii: "0") }) else { throw fail("the parent id must not be all zeros") }
        rawValue = text
    }

    public var traceID: Substring { rawValue.split(separator: "-")[1] }
    public var description: String { rawValue }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        do {
            try self.init(text)
        } catch {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: error.description)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }

    private static func isLowerHex(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
    }
}
