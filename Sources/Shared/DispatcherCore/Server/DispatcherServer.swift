import FleetAccess
import DispatcherProtocol
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import ServiceLifecycle
import Synchronization

/// The dispatcher's socket server: TCP and/or a Unix socket, newline-delimited JSON
/// (`docs/protocol.md`). `bind` opens the listeners (so a busy port fails at start); `run`
/// serves until cancelled or shut down gracefully: it stops accepting, stops reading, answers
/// what is in flight, then closes.
public final class DispatcherServer: Service {
    private struct Listener: Sendable {
        let channel: NIOAsyncChannel<NIOAsyncChannel<ByteBuffer, ByteBuffer>, Never>
        let transport: Transport
    }

    private let listeners: [Listener]
    private let connection: Connection
    private let connections: ConnectionCount
    private let socketPath: String?
    private let logger: Logger
    /// The TCP port listened on (useful when the settings asked for port 0).
    public let tcpPort: Int?

    private init(listeners: [Listener], connection: Connection, maxConnections: Int, socketPath: String?, logger: Logger) {
        self.listeners = listeners
        self.connection = connection
        self.connections = ConnectionCount(limit: maxConnections)
        self.socketPath = socketPath
        self.logger = logger
        tcpPort = listeners.first { $0.transport == .tcp }?.channel.channel.localAddress?.port
    }

    public static func bind(
        settings: DispatcherSettings, operations: OperationRegistry, tokens: AccessTokens, logger: Logger,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> DispatcherServer {
        try settings.validateForServer()
        let maxFrameBytes = settings.maxFrameBytes
        let frameTimeout = TimeAmount.nanoseconds(Int64(settings.frameTimeout.seconds * 1e9))
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 1024)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.allowRemoteHalfClosure, value: true)
        let tlsContext = try settings.serverTLS?.makeContext()
        // TCP clients must authenticate: until they do, a frame is at most an `auth`'s size.
        func initialize(_ transport: Transport) -> @Sendable (any Channel) -> EventLoopFuture<NIOAsyncChannel<ByteBuffer, ByteBuffer>> {
            let untilAuthenticated = transport == .tcp ? WireFormat.maxUnauthenticatedFrameBytes : nil
            let tls = transport == .tcp ? tlsContext : nil
            return { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let tls { try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls)) }
                    try channel.pipeline.syncOperations.addHandler(
                        FrameReader(maxFrameBytes: maxFrameBytes, untilAuthenticated: untilAuthenticated, frameTimeout: frameTimeout))
                    return try NIOAsyncChannel(wrappingChannelSynchronously: channel)
                }
            }
        }
        var listeners: [Listener] = []
        do {
            if case .tcp(let host, let port)? = settings.tcp {
                let channel = try await bootstrap.bind(host: host, port: port, childChannelInitializer: initialize(.tcp))
                listeners.append(Listener(channel: channel, transport: .tcp))
            }
            if let path = settings.socketPath {
                try FileManager.default.createDirectory(
                    atPath: URL(fileURLWithPath: path).deletingLastPathComponent().path, withIntermediateDirectories: true)
                let channel = try await bootstrap.bind(unixDomainSocketPath: path, cleanupExistingSocketFile: true, childChannelInitializer: initialize(.unix))
                listeners.append(Listener(channel: channel, transport: .unix))
                guard chmod(path, mode_t(settings.socketMode)) == 0 else { throw DispatcherServerError.socketMode(path: path, errno: errno) }
            }
        } catch {
            for listener in listeners { try? await listener.channel.channel.close() }
            throw error
        }
        let router = RequestRouter(registry: operations, tokens: tokens)
        let ops = (operations.names + [AuthRequest.op]).sorted()
        let connection = Connection(
            router: router,
            greeting: { Greeting(authRequired: $0 == .tcp, maxFrameBytes: maxFrameBytes, ops: ops) },
            idleTimeout: settings.idleTimeout, writeTimeout: settings.writeTimeout, maxInFlight: settings.maxInFlight, logger: logger)
        let server = DispatcherServer(listeners: listeners, connection: connection, maxConnections: settings.maxConnections,
                                      socketPath: settings.socketPath, logger: logger)
        var listening: Logger.Metadata = ["socket": "\(settings.socketPath ?? "off")", "tcp": "off"]
        if case .tcp(let host, _)? = settings.tcp, let port = server.tcpPort {
            listening["tcp"] = "\(DispatcherAddress.tcp(host: host, port: port))"
            listening["tls"] = settings.serverTLS == nil ? "off" : settings.serverTLS?.clientCAPath == nil ? "on" : "mutual"
        }
        logger.info("dispatcher listening", metadata: listening)
        if let tcp = settings.tcp, !tcp.isLoopback, settings.serverTLS == nil {
            logger.warning("the TCP listener is not on loopback and has no TLS: tokens and payloads cross the network in clear text; set FLEET_DISPATCHER_TLS_CERT and FLEET_DISPATCHER_TLS_KEY",
                           metadata: ["tcp": "\(tcp)"])
        }
        return server
    }

    public func run() async throws {
        try await withGracefulShutdownHandler {
            try await withThrowingDiscardingTaskGroup { group in
                for listener in listeners {
                    group.addTask { try await self.accept(on: listener) }
                }
            }
        } onGracefulShutdown: { [listeners] in
            for listener in listeners { listener.channel.channel.close(promise: nil) }
        }
        if let socketPath { unlink(socketPath) }
    }

    private func accept(on listener: Listener) async throws {
        try await withThrowingDiscardingTaskGroup { group in
            try await listener.channel.executeThenClose { inbound in
                for try await channel in inbound {
                    guard connections.admit() else {
                        group.addTask { await self.refuse(channel) }
                        continue
                    }
                    group.addTask {
                        await self.connection.serve(channel, transport: listener.transport)
                        self.connections.release()
                    }
                }
            }
        }
    }

    private func refuse(_ channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>) async {
        logger.warning("connection refused: at the connection limit", metadata: ["limit": "\(connections.limit)"])
        try? await channel.executeThenClose { _, outbound in
            let response = ServerResponse.failure(nil, .tooManyConnections, "the dispatcher is at its connection limit (\(connections.limit))")
            try await outbound.write(try WireFormat.frame(response, encoder: WireFormat.makeEncoder()))
        }
    }
}

public enum DispatcherServerError: Error, CustomStringConvertible {
    case socketMode(path: String, errno: Int32)

    public var description: String {
        switch self {
        case .socketMode(let path, let errno): "cannot set the mode of \(path): \(String(cString: strerror(errno)))"
        }
    }
}

/// Connections open at once, across listeners.
private final class ConnectionCount: Sendable {
    let limit: Int
    private let open = Mutex(0)

    init(limit: Int) { self.limit = limit }

    func admit() -> Bool {
        open.withLock { open in
            guard open < limit else { return false }
            open += 1
            return true
        }
    }

    func release() { open.withLock { $0 -= 1 } }
}
