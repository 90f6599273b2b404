import Foundation
import Hummingbird
import NIOCore

/// A rembg server (`rembg s`) on loopback: `POST /api/remove` with a multipart `file` part
/// and form fields, answering the RGBA PNG, a FastAPI-style 422, or what the script says.
public final class FakeRembg: Sendable {
    public let script: FakeScript
    public let server: FakeServer
    private let log: RequestLog

    public var baseURL: String { server.baseURL }
    public var requests: [ReceivedRequest] { log.all }

    private init(script: FakeScript, server: FakeServer, log: RequestLog) {
        self.script = script
        self.server = server
        self.log = log
    }

    public static func start(script: FakeScript = FakeScript()) async throws -> FakeRembg {
        let log = RequestLog()
        let router = Router()
        router.post("/api/remove") { request, _ -> Response in
            let body = Data(buffer: try await request.body.collect(upTo: 64 << 20))
            let contentType = request.headers[.contentType] ?? ""
            let parts = MultipartParser.parse(body, contentType: contentType)
            var fields = parts.compactMapValues { String(data: $0.data, encoding: .utf8) }
            fields["file"] = parts["file"].map { "\($0.data.count) bytes" }
            log.append(ReceivedRequest(path: "/api/remove", headers: request.headers.dictionary, fields: fields))
            guard let file = parts["file"]?.data else {
                return .json(status: 422, #"{"detail":[{"loc":["body","file"],"msg":"field required","type":"value_error.missing"}]}"#)
            }
            let behaviour = script.next()
            if case .succeedAfter(let delay) = behaviour { try await FakeServer.pause(for: delay) }
            switch behaviour {
            case .succeed, .succeedAfter, .succeedAfterPolls, .succeedWithOutputArray:
                return Response(status: .ok, headers: [.contentType: "image/png"],
                                body: .init(byteBuffer: ByteBuffer(bytes: try await realCutout(of: file))))
            case .fail(let status) where status == 422:
                return .json(status: 422, #"{"detail":[{"loc":["body","model"],"msg":"unknown model","type":"value_error"}]}"#)
            case .fail(let status):
                return .json(status: status, #"{"detail":"Internal Server Error"}"#)
            case .failPrediction:
                return .json(status: 500, #"{"detail":"Internal Server Error"}"#)
            case .hang:
                try await FakeServer.pause(for: .seconds(120))
                return Response(status: .ok)
            case .notPNG, .garbledPrediction, .garbledPolls:
                return Response(status: .ok, headers: [.contentType: "text/html"],
                                body: .init(byteBuffer: ByteBuffer(string: "<html>maintenance</html>")))
            }
        }
        return FakeRembg(script: script, server: try await FakeServer.start(router: router), log: log)
    }

    public func stop() async { await server.stop() }
}
