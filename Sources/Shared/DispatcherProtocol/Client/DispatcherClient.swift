import FleetSupport
import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// Failures of the client itself, as opposed to errors the dispatcher answers with (`DispatcherError`).
public enum DispatcherClientError: Error, Equatable, CustomStringConvertible {
    /// Closed by `close()`, or ended with reconnection turned off.
    case connectionClosed
    case unexpectedFrame(String)
    case incompatibleServer(String)
    /// The connection broke after this request was sent and before its answer came, and the
    /// request is not one that may be sent twice: the dispatcher may or may not have applied it.
    case connectionLost(op: String)
    /// No connection could be opened again within the reconnect policy's timeout.
    case notConnected(seconds: Int, lastError: String)

    /// The same codes as the Node client's errors.
    public var code: String {
        switch self {
        case .connectionClosed: "CONNECTION_CLOSED"
        case .unexpectedFrame: "UNEXPECTED_FRAME"
        case .incompatibleServer: "INCOMPATIBLE_SERVER"
        case .connectionLost: "CONNECTION_LOST"
        case .notConnected: "NOT_CONNECTED"
        }
    }

    public var description: String {
        switch self {
        case .connectionClosed: "the dispatcher connection is closed"
        case .unexpectedFrame(let text): "unexpected frame from the dispatcher: \(text)"
        case .incompatibleServer(let reason): "incompatible dispatcher: \(reason)"
        case .connectionLost(let op):
            "CONNECTION_LOST: the connection to the dispatcher broke after `\(op)` was sent; it may or may not have been applied"
        case .notConnected(let seconds, let lastError):
            "NOT_CONNECTED: no connection to the dispatcher within \(seconds) s (last attempt: \(lastError))"
        }
    }
}

/// A client of the dispatcher over one or more connections. Any number of tasks may call `send`
/// at once: requests are pipelined, spread over the pool's connections in turn, and each
/// response finds its caller by request id, whatever order they come back in.
///
/// A connection that ends (an idle close, a dispatcher restart, a network break) is opened again
/// on the next request, by `ReconnectPolicy`. Requests in flight when it ended are sent again
/// when `isSafeToRepeat` (RequestSafety.swift) and fail with `connectionLost` otherwise.
public final class DispatcherClient: Sendable {
    private let connections: [DispatcherConnection]
    private let reconnect: ReconnectPolicy
    private let nextID = Atomic<Int64>(0)
    private let nextConnection = Atomic<Int>(0)
    private let writtenFrames = Atomic<Int>(0)
    private let encoder = WireFormat.makeEncoder()
    private let decoder = WireFormat.makeDecoder()

    private init(connections: [DispatcherConnection], reconnect: ReconnectPolicy) {
        self.connections = connections
        self.reconnect = reconnect
    }

    /// The greeting of the latest connection (of the first, in a pool).
    public var greeting: Greeting { connections[0].greeting }

    /// Opens `poolSize` connections, each greeted and authenticated with `token` when the server
    /// requires it. These first connections are not retried: a wrong address or token fails here.
    public static func connect(
        to address: DispatcherAddress, token: String? = nil, tls: DispatcherTLS.Client? = nil, maxFrameBytes: Int = 64 << 20,
        connectTimeout: Duration = .seconds(5), poolSize: Int = 1, reconnect: ReconnectPolicy = .default,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> DispatcherClient {
        precondition(poolSize >= 1, "a pool of at least one connection")
        // TLS over TCP only: the Unix socket's file permissions are its access control.
        let settings = ConnectionSettings(
            address: address, token: token, tlsContext: try tls.flatMap { tls in address.isTCP ? try tls.makeContext() : nil },
            maxFrameBytes: maxFrameBytes, connectTimeout: connectTimeout, reconnect: reconnect, group: group)
        var connections: [DispatcherConnection] = []
        do {
            for _ in 0..<poolSize { connections.append(try await DispatcherConnection.open(settings)) }
        } catch {
            for connection in connections { await connection.close() }
            throw error
        }
        return DispatcherClient(connections: connections, reconnect: reconnect)
    }

    /// Sends one request and returns its result; throws `DispatcherError` when the dispatcher
    /// refuses it, `DispatcherClientError` when the connection fails it. With `traceparent`, the
    /// dispatcher's spans for it join the caller's trace.
    public func send<Request: DispatcherRequest>(_ request: Request, traceparent: TraceParent? = nil) async throws -> Request.Result {
        let connection = connections[nextConnection.add(1, ordering: .relaxed).newValue % connections.count]
        let started = ContinuousClock.now
        var request = request
        var resends = 0
        while true {
            let live = try await connection.live()
            let id = nextID.add(1, ordering: .relaxed).newValue
            do {
                return try await ChannelExchange.send(
                    request, id: id, traceparent: traceparent, on: live.channel, encoder: encoder, decoder: decoder,
                    written: { [self] in writtenFrames.add(1, ordering: .relaxed) })
            } catch let ended as ConnectionEnded {
                if ended.sent {
                    guard reconnect.enabled else { throw DispatcherClientError.connectionClosed }
                    guard request.isSafeToRepeat, resends < reconnect.maxResends else {
                        throw DispatcherClientError.connectionLost(op: Request.op)
                    }
                    resends += 1
                    request = request.resent(after: ContinuousClock.now - started)
                }
                // Never written, or safe to write again: on the next connection, once this one is gone.
                try? await live.channel.closeFuture.get()
            }
        }
    }

    /// How many request frames were written whole to the socket (the kernel took them): whether a
    /// request may have reached the dispatcher, which decides if it is sent again after a break.
    public var requestsWritten: Int { writtenFrames.load(ordering: .relaxed) }

    /// How many of its connections are open now: one the dispatcher closed (idle, restarting)
    /// counts again once a request has opened it anew.
    public var connectionsUp: Int { connections.filter(\.isUp).count }

    public func close() async {
        for connection in connections { await connection.close() }
    }
}

extension DispatcherClient {
    public func ping() async throws -> PingRequest.Result { try await send(PingRequest()) }

    public func enqueue(kind: String, payload: [String: JSONValue] = [:], options: JobOptions? = nil) async throws -> EnqueuedJobResult {
        try await send(EnqueueRequest(kind: kind, payload: payload, options: options))
    }

    /// Jobs that run after one another, enqueued together (`jobs.enqueueGraph`).
    public func enqueueGraph(_ jobs: [EnqueueGraphRequest.Job], idempotencyKey: String? = nil) async throws -> EnqueueGraphRequest.Result {
        try await send(EnqueueGraphRequest(jobs: jobs, idempotencyKey: idempotencyKey))
    }

    public func status(jobId: Int64) async throws -> JobStatus { try await send(StatusRequest(jobId: jobId)) }

    public func wait(jobId: Int64, timeoutMs: Int? = nil) async throws -> WaitRequest.Result {
        try await send(WaitRequest(jobId: jobId, timeoutMs: timeoutMs))
    }

    public func cancel(jobId: Int64) async throws -> CancelRequest.Result { try await send(CancelRequest(jobId: jobId)) }

    public func stats(windowSeconds: Int? = nil) async throws -> QueueStats { try await send(StatsRequest(windowSeconds: windowSeconds)) }

    /// A user's balance and whether renders are free for them now (`credits.get`).
    public func credits(userId: String) async throws -> CreditBalanceView { try await send(CreditsGetRequest(userId: userId)) }
}
