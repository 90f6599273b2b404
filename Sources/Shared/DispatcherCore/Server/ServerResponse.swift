import DispatcherProtocol
import FleetSupport
import NIOCore

/// One response frame: `{"type":"response","id":…,"ok":…,"result":…,"error":…}`, every field
/// present (explicit nulls).
struct ServerResponse: Encodable, Sendable {
    let id: RequestID?
    let outcome: Result<any Encodable & Sendable, DispatcherError>

    static func failure(_ id: RequestID?, _ code: DispatcherErrorCode, _ message: String) -> ServerResponse {
        ServerResponse(id: id, outcome: .failure(DispatcherError(code, message)))
    }

    private enum CodingKeys: String, CodingKey { case type, id, ok, result, error }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode("response", forKey: .type)
        try container.encode(id, forKey: .id)
        switch outcome {
        case .success(let result):
            try container.encode(true, forKey: .ok)
            try container.encode(result, forKey: .result)
            try container.encodeNil(forKey: .error)
        case .failure(let error):
            try container.encode(false, forKey: .ok)
            try container.encodeNil(forKey: .result)
            try container.encode(error, forKey: .error)
        }
    }
}

/// A result the server writes by hand into its frame, without `JSONEncoder`: the answer of the
/// most frequent request, where the encoder took a tenth of the dispatcher's CPU
/// (docs/benchmarks.md, "Single enqueues"). It writes what its `Encodable` conformance would,
/// keys sorted, no spaces.
protocol HandEncodedResult {
    func appendJSON(to bytes: inout [UInt8])
}

extension ServerResponse {
    /// The frame, written by hand, of a success whose result is a `HandEncodedResult`; nil for
    /// any other answer (`WireFormat.frame` encodes those).
    var handEncodedFrame: ByteBuffer? {
        guard case .success(let result) = outcome, let result = result as? any HandEncodedResult else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(128)
        bytes.append(contentsOf: #"{"error":null,"id":"#.utf8)
        switch id {
        case .number(let number)?: bytes.append(contentsOf: String(number).utf8)
        case .string(let text)?: bytes.appendJSONString(text)
        case nil: bytes.append(contentsOf: "null".utf8)
        }
        bytes.append(contentsOf: #","ok":true,"result":"#.utf8)
        result.appendJSON(to: &bytes)
        bytes.append(contentsOf: #","type":"response"}"#.utf8)
        bytes.append(UInt8(ascii: "\n"))
        return ByteBuffer(bytes: bytes)
    }
}

extension EnqueuedJobResult: HandEncodedResult {
    func appendJSON(to bytes: inout [UInt8]) {
        bytes.append(contentsOf: isNew ? #"{"isNew":true,"jobId":"#.utf8 : #"{"isNew":false,"jobId":"#.utf8)
        bytes.append(contentsOf: String(jobId).utf8)
        bytes.append(contentsOf: #","kind":"#.utf8)
        bytes.appendJSONString(kind)
        bytes.append(UInt8(ascii: "}"))
    }
}
