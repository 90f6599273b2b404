import DispatcherProtocol

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
