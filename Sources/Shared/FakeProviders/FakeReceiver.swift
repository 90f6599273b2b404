import Foundation
import Hummingbird
import NIOCore
import Synchronization

/// A backend's endpoint on loopback, for callbacks and HTTP jobs: records every request whole
/// (method, path, headers, raw body) and answers what its script says, in order, then 200.
public final class FakeReceiver: Sendable {
    public enum Answer: Sendable {
        case status(Int, body: String = "")
        /// A 302 to `location`.
        case redirect(to: String)
        /// Waits, then answers 200: longer than the caller's timeout, a timeout.
        case delay(Duration)
    }

    public let server: FakeServer
    private let log: Log

    public var baseURL: String { server.baseURL }
    public var port: Int { server.port }
    public var requests: [RecordedRequest] { log.state.withLock { $0.requests } }

    private init(server: FakeServer, log: Log) {
        self.server = server
        self.log = log
    }

    public static func start(answers: [Answer] = []) async throws -> FakeReceiver {
        let log = Log(answers)
        let router = Router()
        let respond: @Sendable (Request, BasicRequestContext) async throws -> Response = { request, _ in
            var recorded = FakeHTTP.record(request, body: try await FakeHTTP.body(request))
            // HTTP/1.1's Host arrives as the request's authority, not among its header fields.
            recorded.headers["host"] = request.head.authority
            switch log.answer(recording: recorded) {
            case .status(let status, let text):
                return Response(status: .init(code: status), body: .init(byteBuffer: ByteBuffer(string: text)))
            case .redirect(let location):
                return Response(status: .found, headers: [.location: location])
            case .delay(let wait):
                try await FakeServer.pause(for: wait)
                return Response(status: .ok)
            }
        }
        router.get("**", use: respond)
        router.post("**", use: respond)
        router.put("**", use: respond)
        router.patch("**", use: respond)
        router.delete("**", use: respond)
        return FakeReceiver(server: try await FakeServer.start(router: router), log: log)
    }

    public func stop() async { await server.stop() }

    private final class Log: Sendable {
        let state: Mutex<(script: [Answer], requests: [RecordedRequest])>

        init(_ script: [Answer]) { state = Mutex((script, [])) }

        func answer(recording request: RecordedRequest) -> Answer {
            state.withLock { state in
                state.requests.append(request)
                return state.script.isEmpty ? .status(200, body: "ok") : state.script.removeFirst()
            }
        }
    }
}
