import FakeProviders
import FleetHTTPClient
import FleetStorage
import Foundation
import Hummingbird
import NIOCore
import Synchronization

/// An HTTP proxy on loopback in front of the test gateway that answers S3's own errors when told
/// to (503 `SlowDown`, 500 `InternalError`), and forwards every other request to the gateway with
/// its `Host` header as signed. Counts the requests that reached it by method.
final class S3FaultProxy: Sendable {
    enum Fault: Sendable {
        case slowDown
        case internalError
    }

    let server: FakeServer
    let gateway: S3Gateway.Connection
    private let shared: Shared

    /// What the proxy's requests and the test share.
    private final class Shared: Sendable {
        let state = Mutex(State())
    }

    private struct State {
        var faults: [Fault] = []
        /// Every request answers 503 while set.
        var down = false
        /// `down` is raised by the request that makes this method's count exceed this.
        var downAfter: (method: String, count: Int)?
        var counts: [String: Int] = [:]
    }

    private init(server: FakeServer, gateway: S3Gateway.Connection, shared: Shared) {
        self.server = server
        self.gateway = gateway
        self.shared = shared
    }

    /// The gateway's bucket and keys, reached through the proxy.
    var endpoint: S3Endpoint {
        S3Endpoint(scheme: .http, host: "127.0.0.1", port: server.port, region: gateway.endpoint.region, bucket: gateway.endpoint.bucket, addressing: .pathStyle)
    }

    /// The next requests answer these faults, one each, in order.
    func inject(_ faults: [Fault]) { shared.state.withLock { $0.faults += faults } }
    /// Every request answers 503 from now until `setDown(false)`.
    func setDown(_ down: Bool) { shared.state.withLock { $0.down = down } }
    /// Forwards `count` requests of `method`, then answers 503 to everything.
    func goDown(afterForwarding count: Int, of method: String) { shared.state.withLock { $0.downAfter = (method, count) } }
    func count(_ method: String) -> Int { shared.state.withLock { $0.counts[method, default: 0] } }

    static func start(before gateway: S3Gateway.Connection) async throws -> S3FaultProxy {
        let shared = Shared()
        let upstream = "http://\(gateway.endpoint.host):\(gateway.endpoint.port ?? 80)"
        let router = Router()
        router.add(middleware: Forwarder(shared: shared, http: CurlHTTPClient(), upstream: upstream))
        return S3FaultProxy(server: try await FakeServer.start(router: router), gateway: gateway, shared: shared)
    }

    func stop() async { await server.stop() }

    private struct Forwarder: RouterMiddleware {
        typealias Context = BasicRequestContext
        let shared: Shared
        let http: CurlHTTPClient
        let upstream: String

        func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
            let method = request.method.rawValue
            let fault: Fault? = shared.state.withLock { state in
                state.counts[method, default: 0] += 1
                if let trip = state.downAfter, state.counts[trip.method, default: 0] > trip.count { state.down = true }
                if state.down { return .slowDown }
                return state.faults.isEmpty ? nil : state.faults.removeFirst()
            }
            let body = Data(buffer: try await request.body.collect(upTo: 64 << 20))
            if let fault {
                let (status, code): (HTTPResponse.Status, String) = switch fault {
                case .slowDown: (.serviceUnavailable, "SlowDown")
                case .internalError: (.internalServerError, "InternalError")
                }
                let xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>\(code)</Code><Message>injected</Message><RequestId>proxy</RequestId></Error>"
                return Response(status: status, headers: [.contentType: "application/xml"], body: .init(byteBuffer: ByteBuffer(string: xml)))
            }
            let skipped: Set<String> = ["content-length", "transfer-encoding", "connection", "expect", "accept-encoding"]
            // HTTPTypes keeps Host apart (`authority`); the gateway checks the signature over it.
            let headers = [(name: "Host", value: request.head.authority ?? "")]
                + request.headers.filter { !skipped.contains($0.name.canonicalName) }.map { (name: $0.name.rawName, value: $0.value) }
            var forwarded = HTTPClientRequest(
                method: HTTPClientRequest.Method(rawValue: method) ?? .get, url: upstream + request.uri.description, headers: headers,
                body: body.isEmpty && method != "PUT" && method != "POST" ? nil : body, maxResponseBytes: 64 << 20)
            forwarded.followsRedirects = false
            let answer = try await http.execute(forwarded)
            var fields = HTTPFields()
            // A HEAD's Content-Length is the object's size, which its answer must carry.
            let dropped: Set<String> = method == "HEAD" ? ["transfer-encoding", "connection"] : ["content-length", "transfer-encoding", "connection"]
            for (name, value) in answer.headers where !dropped.contains(name) {
                if let field = HTTPFields.Element.Name(name) { fields[field] = value }
            }
            return Response(status: .init(code: answer.status), headers: fields, body: .init(byteBuffer: ByteBuffer(data: answer.body)))
        }
    }
}
