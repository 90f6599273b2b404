import FleetHTTPClient
import Foundation

extension HTTPClientResponse {
    var text: String { String(decoding: body, as: UTF8.self) }

    /// A JSON object answer's field.
    func field(_ name: String) -> Any? {
        (try? JSONSerialization.jsonObject(with: body) as? [String: Any])?[name]
    }
}
