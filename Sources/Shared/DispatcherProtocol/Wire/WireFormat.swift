import Foundation
import NIOCore

/// The dispatcher's socket protocol: newline-delimited JSON frames, camelCase fields, ISO 8601
/// dates, explicit nulls. `docs/protocol.md` is the reference; this file holds what server and
/// clients both need.
public enum WireFormat {
    public static let name = "wearbloom-dispatcher"
    /// Raised when a frame's meaning changes; additions (new ops, new fields) keep it.
    public static let version = 1
    public static let defaultMaxFrameBytes = 1 << 20
    /// A frame nested deeper than this is refused (`MALFORMED_FRAME`), found in one pass.
    public static let maxDepth = 64
    /// Frames before `auth` on TCP (an `auth` or a `ping`) are at most this long.
    public static let maxUnauthenticatedFrameBytes = 1024
    /// Integer request ids go up to 2^53 - 1 either way (JavaScript's `Number.MAX_SAFE_INTEGER`):
    /// every integer up to it has a double of its own, so whatever parser a client uses echoes
    /// it exactly. 2^53 itself is refused: 2^53 + 1 is read as the same double, and an answer
    /// to either could not be matched.
    public static let maxIntegerID = 9_007_199_254_740_991.0

    /// ISO 8601 with milliseconds, in UTC.
    public static func makeEncoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(date.formatted(iso8601WithMilliseconds))
        }
        return encoder
    }

    /// Accepts ISO 8601 dates with or without fractional seconds.
    public static func makeDecoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            if let date = parseDate(text) { return date }
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "'\(text)' is not an ISO 8601 date")
        }
        return decoder
    }

    /// An ISO 8601 date with or without fractional seconds; nil for anything else.
    public static func parseDate(_ text: String) -> Date? {
        (try? iso8601WithMilliseconds.parse(text)) ?? (try? Date.ISO8601FormatStyle().parse(text))
    }

    private static let iso8601WithMilliseconds = Date.ISO8601FormatStyle(includingFractionalSeconds: true)

    /// One frame: the value's JSON and a newline.
    public static func frame(_ value: some Encodable, encoder: JSONEncoder) throws -> ByteBuffer {
        var data = try encoder.encode(value)
        data.append(UInt8(ascii: "\n"))
        return ByteBuffer(bytes: data)
    }
}

/// A request's id, chosen by the client and echoed in its response: a string or an integer.
public enum RequestID: Codable, Hashable, Sendable, CustomStringConvertible {
    case number(Int64)
    case string(String)

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let number = try? container.decode(Int64.self) {
            self = .number(number)
        } else if let text = try? container.decode(String.self) {
            self = .string(text)
        } else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "a request id is a string or an integer")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .number(let number): try container.encode(number)
        case .string(let text): try container.encode(text)
        }
    }

    public var description: String {
        switch self {
        case .number(let number): "\(number)"
        case .string(let text): text
        }
    }
}

/// The first frame on every connection.
public struct Greeting: Codable, Sendable, Equatable {
    public var type = "greeting"
    public var `protocol` = WireFormat.name
    public var version = WireFormat.version
    /// Whether operations other than `ping` and `auth` need an `auth` first (TCP does; the Unix socket relies on file permissions).
    public var authRequired: Bool
    public var maxFrameBytes: Int
    /// The operations this server knows.
    public var ops: [String]

    public init(authRequired: Bool, maxFrameBytes: Int, ops: [String]) {
        self.authRequired = authRequired
        self.maxFrameBytes = maxFrameBytes
        self.ops = ops
    }
}

/// A request as a client writes it. `traceparent` is left out of the frame when nil.
public struct RequestFrame<Request: DispatcherRequest>: Encodable {
    public let id: RequestID
    public let op = Request.op
    public let args: Request
    public let traceparent: TraceParent?

    public init(id: RequestID, args: Request, traceparent: TraceParent? = nil) {
        self.id = id
        self.args = args
        self.traceparent = traceparent
    }
}

/// The parts of a response a client reads before knowing the result's type. `id` is null for
/// an error about the connection itself (a frame too large, a timeout) rather than one request.
public struct ResponseHeader: Decodable, Sendable {
    public let type: String
    public let id: RequestID?
    public let ok: Bool?
    public let error: DispatcherError?
}

/// A successful response's result, decoded once its type is known.
public struct ResponseResult<Result: Decodable>: Decodable {
    public let result: Result
}
