import Foundation
import Hummingbird
import NIOCore
import Synchronization

extension Response {
    /// A JSON answer with the given status.
    static func json(status: Int, _ body: String) -> Response {
        Response(status: .init(code: status), headers: [.contentType: "application/json"],
                 body: .init(byteBuffer: ByteBuffer(string: body)))
    }

    static func json(status: Int = 200, object: Any) throws -> Response {
        let data = try JSONSerialization.data(withJSONObject: object)
        return Response(status: .init(code: status), headers: [.contentType: "application/json"],
                        body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}

extension HTTPFields {
    /// Lower-cased names to values, for assertions.
    var dictionary: [String: String] {
        Dictionary(map { ($0.name.canonicalName, $0.value) }, uniquingKeysWith: { _, last in last })
    }
}

/// Just enough of `multipart/form-data` (RFC 7578) to read what a client sent.
enum MultipartParser {
    struct Part {
        let filename: String?
        let data: Data
    }

    /// Parts by their `name`.
    static func parse(_ body: Data, contentType: String) -> [String: Part] {
        guard let boundaryRange = contentType.range(of: "boundary=") else { return [:] }
        let boundary = contentType[boundaryRange.upperBound...].trimmingCharacters(in: CharacterSet(charactersIn: "\" "))
        let delimiter = Data("--\(boundary)".utf8)
        var parts: [String: Part] = [:]
        var cursor = body.startIndex
        while let start = body.range(of: delimiter, in: cursor..<body.endIndex) {
            cursor = start.upperBound
            guard let end = body.range(of: delimiter, in: cursor..<body.endIndex) else { break }
            let section = body[cursor..<end.lowerBound]
            if let split = section.range(of: Data("\r\n\r\n".utf8)) {
                let head = String(decoding: section[section.startIndex..<split.lowerBound], as: UTF8.self)
                var content = section[split.upperBound...]
                if content.suffix(2) == Data("\r\n".utf8) { content = content.dropLast(2) }
                if let name = attribute("name", in: head) {
                    parts[name] = Part(filename: attribute("filename", in: head), data: Data(content))
                }
            }
        }
        return parts
    }

    private static func attribute(_ name: String, in head: String) -> String? {
        guard let range = head.range(of: " \(name)=\"") ?? head.range(of: ";\(name)=\"") else { return nil }
        let rest = head[range.upperBound...]
        return rest.firstIndex(of: "\"").map { String(rest[..<$0]) }
    }
}

/// Recording and answering for the fal and Google fakes (bodies kept as bytes, extra headers).
enum FakeHTTP {
    static func record(_ request: Request, body: Data) -> RecordedRequest {
        var query: [String: String] = [:]
        for (name, value) in request.uri.queryParameters { query[String(name)] = String(value) }
        return RecordedRequest(method: request.method.rawValue, path: request.uri.path, query: query, headers: request.headers.dictionary, body: body)
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
