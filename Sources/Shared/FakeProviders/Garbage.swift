import Foundation
import Hummingbird

/// What a provider (or a proxy in front of it) sends instead of its documented JSON, with a
/// 200: the fakes' malformed-answer fault modes turn the answer they would have sent into this.
public enum Garbage: String, Sendable, CaseIterable {
    /// An error page from a proxy, as `text/html`.
    case htmlPage
    /// The real answer cut off halfway, framing intact (a proxy that lost the upstream stream).
    case truncated
    /// The real answer's keys with every value of the wrong type (`"status": 42`).
    case wrongTypes

    /// `object` (the answer the fake would have sent) garbled, status 200.
    func response(_ object: [String: Any]) -> Response {
        let valid = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8)
        switch self {
        case .htmlPage:
            return FakeHTTP.bytes(200, Data("<html><body><h1>502 Bad Gateway</h1></body></html>".utf8), contentType: "text/html")
        case .truncated:
            return FakeHTTP.bytes(200, valid.prefix(valid.count / 2), contentType: "application/json")
        case .wrongTypes:
            return FakeHTTP.json(200, object.mapValues(Garbage.retyped))
        }
    }

    /// A value of another JSON type: strings become numbers, everything else a string.
    private static func retyped(_ value: Any) -> Any {
        value is String ? 42 : "unexpected"
    }
}
