/// A string enum of the protocol whose refusal names the values it takes: a client that sends
/// `vote: "thumbs-down"` learns that `up` and `down` are what it means.
public protocol WireEnum: RawRepresentable<String>, CaseIterable, Decodable {}

/// The value of a `WireEnum` that is none of its cases (the `underlyingError` of the
/// `DecodingError.dataCorrupted` its decoding throws).
public struct UnknownWireCase: Error, Sendable {
    public let value: String
    public let known: [String]
}

extension WireEnum {
    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let value = Self(rawValue: text) else {
            let known = Self.allCases.map(\.rawValue)
            throw DecodingError.dataCorrupted(.init(
                codingPath: decoder.codingPath, debugDescription: "'\(text)' is not one of \(known.joined(separator: ", "))",
                underlyingError: UnknownWireCase(value: text, known: known)))
        }
        self = value
    }
}
