import Foundation
import Hummingbird
import NIOCore

/// A small JSON answer (`{"ready":true}`, `{"error":"…"}`).
public enum JSONResponse {
    public static func make(_ status: HTTPResponse.Status, _ object: [String: any Sendable]) -> Response {
        let body = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
        return Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }
}
