import Foundation

/// JSON that PostgreSQL built (jsonb columns): its timestamps are ISO 8601 with up to six
/// fractional digits and a numeric offset (`2026-11-24T15:19:05.534742+00:00`), whole seconds
/// without a fraction. Decoded to `Date`, they leave the process in the protocol's one format.
public enum PostgresJSON {
    public static func makeDecoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = try? Date.ISO8601FormatStyle(includingFractionalSeconds: text.contains(".")).parse(text) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "'\(text)' is not a PostgreSQL timestamp")
            }
            return date
        }
        return decoder
    }
}
