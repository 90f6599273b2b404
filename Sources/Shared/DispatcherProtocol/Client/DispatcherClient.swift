import FleetSupport
import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// Failures of the client itself, as opposed to errors the dispatcher answers with (`DispatcherError`).
public enum DispatcherClientError: Error, Equatable, CustomStringConvertible {
    case connectionClosed
    case unexpectedFrame(String)
    case incompatibleServer(String)

    public var description: String {
        switch self {
        case .connectionClosed: "the dispatcher closed the connection"
        case .unexpectedFrame(let text): "unexpected frame from the dispatcher: \(text)"
        case .incompatibleServer(let reason): "incompatible dispatcher: \(reason)"
        }
    }
}

/// One connection to the dispatcher. Any number of tasks may call `send` at once: requests are
/// pipelined on the connection and each response finds its caller by request id, whatever
/// order they come back in.
public final class DispatcherClient: Sendable {
    public let greeting: Greeting
    private let channel: any Channel
    private let nextID = Atomic<Int64>(0)
    private let encoder = WireFormat.makeEncoder()
    private let decoder = WireFormat.makeDecoder()

    private init(channel: any Channel, greeting: Greeting) {
        self.channel = channel
        self.greeting = greeting
    }

    /// Connects, reads the greeting, and authenticates with `token` when the server requires it.
    public static func connect(
        to address: DispatcherAddress, token: String? = nil, tls: DispatcherTLS.Client? = nil, maxFrameBytes: Int = 64 << 20,
        connectTimeout: Duration = .seconds(5), group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> DispatcherClient {
        let bootstrap = ClientBootstrap(group: group).connectTimeout(.nanoseconds(Int64(connectTimeout.seconds * 1e9)))
        // TLS over TCP only: the Unix socket's file permissions are its access control.
        let tlsContext = try tls.flatMap { tls in address.isTCP ? try tls.makeContext() : nil }
        let initialize: @Sendable (any Channel) -> EventLoopFuture<(any Channel, EventLoopFuture<ByteBuffer>)> = { channel in
            channel.eventLoop.makeCompletedFuture {
                let greeting = channel.eventLoop.makePromise(of: ByteBuffer.self)
                if let tlsContext, case .tcp(let host, _) = address {
                    try channel.pipeline.syncOperations.addHandler(
                        try NIOSSLClientHandler(context: tlsContext, serverHostname: DispatcherTLS.Client.serverName(host)))
                }
                try channel.pipeline.syncOperations.addHandlers(
                    FrameReader(maxFrameBytes: maxFrameBytes), ResponseRouter(greeting: greeting))
                return (channel, greeting.futureResult)
            }
        }
        let (channel, greetingFrame) = switch address {
        case .tcp(let host, let port): try await bootstrap.connect(host: host, port: port, channelInitializer: initialize)
        case .unix(let path): try await bootstrap.connect(unixDomainSocketPath: path, channelInitializer: initialize)
        }
        do {
            let frame = Data(try await greetingFrame.get().readableBytesView)
            let decoder = WireFormat.makeDecoder()
            // A server at its connection limit answers with an error instead of a greeting.
            if let refusal = try? decoder.decode(ResponseHeader.self, from: frame), let error = refusal.error { throw error }
            let greeting = try decoder.decode(Greeting.self, from: frame)
            guard greeting.protocol == WireFormat.name, greeting.version == WireFormat.version else {
                throw DispatcherClientError.incompatibleServer("\(greeting.protocol) version \(greeting.version)")
            }
            let client = DispatcherClient(channel: channel, greeting: greeting)
            if greeting.authRequired, let token { _ = try await client.send(AuthRequest(token: token)) }
            return client
        } catch {
            try? await channel.close()
            throw error
        }
    }

    /// Sends one request and returns its result; throws `DispatcherError` when the dispatcher refuses it.
    public func send<Request: DispatcherRequest>(_ request: Request) async throws -> Request.Result {
        let id = nextID.add(1, ordering: .relaxed).newValue
        let frame = try WireFormat.frame(RequestFrame(id: .number(id), args: request), encoder: encoder)
        let promise = channel.eventLoop.makePromise(of: ByteBuffer.self)
        // A write that never reaches the router (channel already closed) must still end the wait.
        channel.writeAndFlush(PendingRequest(id: id, frame: frame, promise: promise)).whenFailure { promise.fail($0) }
        let response = Data(try await promise.futureResult.get().readableBytesView)
        let header = try decoder.decode(ResponseHeader.self, from: response)
        if let error = header.error { throw error }
        return try decoder.decode(ResponseResult<Request.Result>.self, from: response).result
    }

    public func close() async {
        try? await channel.close()
    }
}

extension DispatcherClient {
    public func ping() async throws -> PingRequest.Result { try await send(PingRequest()) }

    public func enqueue(kind: String, payload: [String: JSONValue] = [:], options: JobOptions? = nil) async throws -> EnqueuedJobResult {
        try await send(EnqueueRequest(kind: kind, payload: payload, options: options))
    }

    public func status(jobId: Int64) async throws -> JobStatus { try await send(StatusRequest(jobId: jobId)) }

    public func wait(jobId: Int64, timeoutMs: Int? = nil) async throws -> WaitRequest.Result {
        try await send(WaitRequest(jobId: jobId, timeoutMs: timeoutMs))
    }

    public func cancel(jobId: Int64) async throws -> CancelRequest.Result { try await send(CancelRequest(jobId: jobId)) }

    public func stats(windowSeconds: Int? = nil) async throws -> QueueStats { try await send(StatsRequest(windowSeconds: windowSeconds)) }
}
