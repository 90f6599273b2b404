import FleetHTTPClient
import FleetStorage
import Foundation
import Hummingbird
import NIOCore
import Synchronization

/// What one request asked of an S3 store, told apart by method, path and query (path-style
/// addressing: `/bucket/key`).
public enum S3RequestKind: String, CaseIterable, Sendable, Comparable {
    case getObject = "GET"
    case headObject = "HEAD"
    case putObject = "PUT"
    case deleteObject = "DELETE"
    /// ListObjects (V1 or V2): a GET of the bucket itself.
    case list = "LIST"
    /// DeleteObjects: a POST of the bucket with `?delete`.
    case deleteObjects = "DeleteObjects"
    /// Anything else asked of the bucket (HEAD bucket, multipart uploads...).
    case other = "other"

    /// The kind of a request with this method, object key (empty when the bucket itself is
    /// asked) and query.
    public init(method: String, key: String, query: String) {
        switch (method, !key.isEmpty) {
        case ("GET", true): self = .getObject
        case ("HEAD", true): self = .headObject
        case ("PUT", true): self = .putObject
        case ("DELETE", true): self = .deleteObject
        case ("GET", false): self = .list
        case ("POST", false) where query.split(separator: "&").contains { $0 == "delete" || $0.hasPrefix("delete=") }: self = .deleteObjects
        default: self = .other
        }
    }

    public static func < (lhs: Self, rhs: Self) -> Bool {
        allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
    }
}

/// One request that reached the proxy: its kind and its object key (empty for the bucket's own
/// requests), percent-decoded.
public struct S3ProxiedRequest: Sendable, Hashable {
    public let kind: S3RequestKind
    public let key: String
}

extension Sequence<S3ProxiedRequest> {
    /// How many of each kind.
    public func countsByKind() -> [S3RequestKind: Int] {
        reduce(into: [:]) { $0[$1.kind, default: 0] += 1 }
    }
}

/// An HTTP proxy on loopback in front of an S3 endpoint (the tests' and the benchmarks' Ceph
/// gateway) that answers S3's own errors when told to (503 `SlowDown`, 500 `InternalError`),
/// forwards every other request with its `Host` header as signed, and records each request that
/// reached it (its kind and key): what the fleet asks of the store, counted on the wire.
public final class S3FaultProxy: Sendable {
    public enum Fault: Sendable {
        case slowDown
        case internalError
    }

    public let server: FakeServer
    /// The store the requests are forwarded to.
    public let upstream: S3Endpoint
    private let shared: Shared

    /// What the proxy's requests and its owner share.
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
        var requests: [S3ProxiedRequest] = []
    }

    private init(server: FakeServer, upstream: S3Endpoint, shared: Shared) {
        self.server = server
        self.upstream = upstream
        self.shared = shared
    }

    /// The upstream's bucket, reached through the proxy.
    public var endpoint: S3Endpoint {
        S3Endpoint(scheme: .http, host: "127.0.0.1", port: server.port, region: upstream.region, bucket: upstream.bucket, addressing: .pathStyle)
    }

    /// The next requests answer these faults, one each, in order.
    public func inject(_ faults: [Fault]) { shared.state.withLock { $0.faults += faults } }
    /// Every request answers 503 from now until `setDown(false)`.
    public func setDown(_ down: Bool) { shared.state.withLock { $0.down = down } }
    /// Forwards `count` requests of `method`, then answers 503 to everything.
    public func goDown(afterForwarding count: Int, of method: String) { shared.state.withLock { $0.downAfter = (method, count) } }
    /// The requests of `method` that reached the proxy, faults answered included.
    public func count(_ method: String) -> Int { shared.state.withLock { $0.counts[method, default: 0] } }
    /// Every request that reached the proxy since it started or since `takeRequests`, in order.
    public var requests: [S3ProxiedRequest] { shared.state.withLock { $0.requests } }

    /// The requests recorded so far, forgotten: the next call answers only those after this one.
    public func takeRequests() -> [S3ProxiedRequest] {
        shared.state.withLock { state in
            defer { state.requests = [] }
            return state.requests
        }
    }

    /// A proxy in front of `upstream`, which must be addressed path-style over plain HTTP (a
    /// gateway on loopback).
    public static func start(before upstream: S3Endpoint) async throws -> S3FaultProxy {
        let shared = Shared()
        let router = Router()
        router.add(middleware: Forwarder(
            shared: shared, http: CurlHTTPClient(), upstream: "http://\(upstream.host):\(upstream.port ?? 80)"))
        return S3FaultProxy(server: try await FakeServer.start(router: router), upstream: upstream, shared: shared)
    }

    public func stop() async { await server.stop() }

    private struct Forwarder: RouterMiddleware {
        typealias Context = BasicRequestContext
        let shared: Shared
        let http: CurlHTTPClient
        let upstream: String

        func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
            let method = request.method.rawValue
            let recorded = Self.recorded(method: method, path: request.uri.path, query: request.uri.query)
            let fault: Fault? = shared.state.withLock { state in
                state.counts[method, default: 0] += 1
                state.requests.append(recorded)
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

        /// The request's kind and its key: the path after the bucket ("/bucket" or "/bucket/"
        /// asks the bucket itself), decoded.
        static func recorded(method: String, path: String, query: String?) -> S3ProxiedRequest {
            let encoded = String(path.drop { $0 == "/" }.drop { $0 != "/" }.dropFirst())
            let key = encoded.removingPercentEncoding ?? encoded
            return S3ProxiedRequest(kind: S3RequestKind(method: method, key: key, query: query ?? ""), key: key)
        }
    }
}
