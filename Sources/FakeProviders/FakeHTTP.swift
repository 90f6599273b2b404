import Foundation
import Hummingbird
import NIOCore
import Synchronization

/// Request and response plumbing shared by the fakes.
enum FakeHTTP {
    static func record(_ request: Request, body: Data) -> RecordedRequest {
        var headers: [String: String] = [:]
        for field in request.headers { headers[field.name.canonicalName] = field.value }
        var query: [String: String] = [:]
        for (name, value) in request.uri.queryParameters { query[String(name)] = String(value) }
        return RecordedRequest(method: request.method.rawValue, path: request.uri.path, query: query, headers: headers, body: body)
    }

    static func body(_ request: Request) async throws -> Data {
        Data(try await request.body.collect(upTo: 64 << 20).readableBytesView)
    }

    static func json(_ status: Int, _ object: Any, headers: [String: String] = [:]) -> Response {
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8)
        return bytes(status, data, contentType: "application/json", headers: headers)
    }

    static func bytes(_ status: Int, _ data: Data, contentType: String, headers: [String: String] = [:]) -> Response {
        var fields = HTTPFields()
        fields[.contentType] = contentType
        for (name, value) in headers { fields[.init(name)!] = value }
        return Response(status: .init(code: status), headers: fields, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}

/// A value set once after the routes that use it are registered (a fake needs its server's port,
/// the server needs the fake's routes).
final class Late<Value: Sendable>: Sendable {
    private let storage = Mutex<Value?>(nil)

    var value: Value { storage.withLock { $0 }! }

    func set(_ value: Value) -> Value {
        storage.withLock { $0 = value }
        return value
    }
}
