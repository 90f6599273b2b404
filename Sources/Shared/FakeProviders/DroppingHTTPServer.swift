import NIOCore
import NIOPosix
import Synchronization

/// An HTTP/1.1 server on loopback that drops connections the ways a provider's edge can: reset
/// after reading a request's head, reset after its whole body, or answer and then close the
/// kept-alive connection while it sits idle in the client's pool. It counts every request
/// whose head it read, so a test sees what reached the wire whatever the client believes.
public final class DroppingHTTPServer: Sendable {
    /// What to do with one request.
    public enum Action: Sendable {
        /// Answers (keep-alive); `closeIdleAfter` then closes the connection unannounced.
        case respond(status: Int, body: String, closeIdleAfter: TimeAmount? = nil)
        /// A TCP reset once the head is read: the body was never taken.
        case resetAfterHead
        /// A TCP reset once the whole body is read: the request arrived, no answer left.
        case resetAfterBody
    }

    /// One request as it reached the server.
    public struct Received: Sendable, Equatable {
        public let method: String
        public let path: String
        /// The connection it came on, numbered from 0 in accept order.
        public let connection: Int
        /// How much of its body had arrived with its head, when the server picked its fate: a
        /// request reset with none of its body could not have been taken as a job.
        public let bodyBytesWithHead: Int
    }

    /// What the connections saw, shared with them.
    private final class Log: Sendable {
        let state = Mutex<(received: [Received], connections: Int, idleCloses: Int)>(([], 0, 0))
    }

    private let channel: any Channel
    private let log = Log()
    public let port: Int
    public var baseURL: String { "http://127.0.0.1:\(port)" }

    /// Starts on a free loopback port; `decide` picks each request's fate from it and the
    /// number of requests received before it.
    public init(_ decide: @escaping @Sendable (_ method: String, _ path: String, _ index: Int) -> Action) async throws {
        let log = self.log
        channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { child in
                let number = log.state.withLock { state in
                    defer { state.connections += 1 }
                    return state.connections
                }
                let handler = DroppingConnectionHandler(connection: number, closedIdle: { log.state.withLock { $0.idleCloses += 1 } }) { method, path, bodyBytes in
                    log.state.withLock { state in
                        state.received.append(Received(method: method, path: path, connection: number, bodyBytesWithHead: bodyBytes))
                        return decide(method, path, state.received.count - 1)
                    }
                }
                return child.pipeline.addHandler(handler)
            }
            .bind(host: "127.0.0.1", port: 0).get()
        port = channel.localAddress?.port ?? 0
    }

    /// Every request whose head arrived, in order.
    public var received: [Received] { log.state.withLock { $0.received } }

    /// Connections accepted so far.
    public var connections: Int { log.state.withLock { $0.connections } }

    /// Connections it closed after `closeIdleAfter`.
    public var idleCloses: Int { log.state.withLock { $0.idleCloses } }

    public func count(_ method: String, _ path: String) -> Int {
        received.filter { $0.method == method && $0.path == path }.count
    }

    public func stop() async {
        try? await channel.close()
    }
}

/// One connection: reads heads and `Content-Length` bodies, acts as told.
private final class DroppingConnectionHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let decide: (_ method: String, _ path: String, _ bodyBytes: Int) -> DroppingHTTPServer.Action
    private var buffer = ByteBuffer()
    /// The request being read: its action and the body bytes still to come.
    private var pending: (action: DroppingHTTPServer.Action, bodyLeft: Int)?
    private var idleClose: Scheduled<Void>?
    private let closedIdle: @Sendable () -> Void

    init(connection: Int, closedIdle: @escaping @Sendable () -> Void,
         decide: @escaping (_ method: String, _ path: String, _ bodyBytes: Int) -> DroppingHTTPServer.Action) {
        self.closedIdle = closedIdle
        self.decide = decide
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var input = unwrapInboundIn(data)
        buffer.writeBuffer(&input)
        idleClose?.cancel()
        process(context)
    }

    private func process(_ context: ChannelHandlerContext) {
        while true {
            if let request = pending {
                let take = min(request.bodyLeft, buffer.readableBytes)
                buffer.moveReaderIndex(forwardBy: take)
                pending?.bodyLeft -= take
                guard pending!.bodyLeft == 0 else { return }
                pending = nil
                switch request.action {
                case .respond(let status, let body, let closeIdleAfter):
                    respond(context, status: status, body: body, closeIdleAfter: closeIdleAfter)
                case .resetAfterBody, .resetAfterHead:
                    return reset(context)
                }
                continue
            }
            let view = buffer.readableBytesView
            guard let end = view.firstRange(of: Array("\r\n\r\n".utf8)) else { return }
            let head = String(decoding: view[view.startIndex..<end.lowerBound], as: UTF8.self)
            buffer.moveReaderIndex(to: end.upperBound)
            let lines = head.split(separator: "\r\n")
            let requestLine = lines.first?.split(separator: " ") ?? []
            let method = requestLine.first.map(String.init) ?? ""
            let path = requestLine.count > 1 ? String(requestLine[1].split(separator: "?")[0]) : ""
            let length = lines.dropFirst().compactMap { line -> Int? in
                let parts = line.split(separator: ":", maxSplits: 1)
                guard parts.count == 2, parts[0].lowercased() == "content-length" else { return nil }
                return Int(parts[1].trimmingCharacters(in: .whitespaces))
            }.first ?? 0
            let action = decide(method, path, min(length, buffer.readableBytes))
            if case .resetAfterHead = action { return reset(context) }
            pending = (action, length)
        }
    }

    private func respond(_ context: ChannelHandlerContext, status: Int, body: String, closeIdleAfter: TimeAmount?) {
        let text = "HTTP/1.1 \(status) X\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: keep-alive\r\n\r\n\(body)"
        context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: text)), promise: nil)
        if let closeIdleAfter {
            let (channel, closedIdle) = (context.channel, closedIdle)
            // Counted once the socket is closed (the FIN sent), not when the close is asked for.
            idleClose = context.eventLoop.scheduleTask(in: closeIdleAfter) {
                channel.close().whenComplete { _ in closedIdle() }
            }
        }
    }

    /// SO_LINGER 0 makes the close a reset: the client reads ECONNRESET, not an orderly end.
    private func reset(_ context: ChannelHandlerContext) {
        let channel = context.channel
        guard let socket = channel as? any SocketOptionProvider else { return channel.close(promise: nil) }
        socket.setSoLinger(linger(l_onoff: 1, l_linger: 0)).whenComplete { _ in channel.close(promise: nil) }
    }
}
