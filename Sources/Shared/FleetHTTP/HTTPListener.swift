import Hummingbird
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization

/// Where a listener binds: `host:port` (`[v6]:port`); port 0 lets the kernel choose.
public struct ListenAddress: Sendable, Equatable, CustomStringConvertible {
    public let host: String
    public let port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// A group of routes an executable mounts on its listener (probes, metrics, webhooks).
public protocol HTTPRoutes: Sendable {
    func register(on router: Router<BasicRequestContext>)
}

/// What one client may hold of the listener.
public struct HTTPListenerLimits: Sendable, Equatable {
    /// A connection that sends nothing for this long is closed: idle between requests, or
    /// stalled in the middle of one (half a header, part of a body). Hummingbird counts a header
    /// only once it is whole, so one sent a byte at a time is cut off all the same.
    public var idleTimeout: Duration
    /// Connections served at once; one beyond it is closed as soon as it is accepted.
    public var maxConnections: Int

    public init(idleTimeout: Duration = .seconds(30), maxConnections: Int = 256) {
        self.idleTimeout = idleTimeout
        self.maxConnections = maxConnections
    }
}

/// The process's one HTTP listener (`FLEET_HTTP_ADDRESS`), a `Service` of its ServiceGroup.
/// Put it first in the group: services stop in reverse order, so it answers probes (and
/// `/readyz` with 503) for as long as the others drain.
public final class HTTPListener: Service {
    public let address: ListenAddress
    public let limits: HTTPListenerLimits
    private let routes: [any HTTPRoutes]
    private let logger: Logger
    private let bound = BoundPort()

    public init(address: ListenAddress, limits: HTTPListenerLimits = HTTPListenerLimits(), routes: [any HTTPRoutes], logger: Logger) {
        self.address = address
        self.limits = limits
        self.routes = routes
        self.logger = logger
    }

    public func run() async throws {
        let router = Router()
        for group in routes { group.register(on: router) }
        let open = OpenConnections(limit: limits.maxConnections)
        let application = Application(
            router: router,
            server: .http1(configuration: .init(
                additionalChannelHandlers: [ConnectionCapHandler(open: open)], idleTimeout: TimeAmount(limits.idleTimeout))),
            configuration: .init(address: .hostname(address.host, port: address.port), serverName: nil),
            onServerRunning: { [bound] channel in bound.resolve(channel.localAddress?.port) },
            logger: logger)
        do {
            try await application.run()
            bound.resolve(nil)
        } catch {
            let listened = bound.resolve(nil)
            // A port in use is a configuration problem: say which variable sets it.
            throw listened ? error : HTTPListenerError.cannotListen(address: address, reason: "\(error)")
        }
    }

    /// The port once listening (the kernel's choice for port 0); nil if the listener could not start.
    public func boundPort() async -> Int? { await bound.value() }
}

/// The listener's connections, counted across its event loops.
final class OpenConnections: Sendable {
    let limit: Int
    private let count = Atomic(0)

    init(limit: Int) { self.limit = limit }

    /// Counts one more; false when that one is over the limit (it is counted all the same, and
    /// uncounted when it closes).
    func open() -> Bool { count.add(1, ordering: .relaxed).newValue <= limit }

    func close() { count.subtract(1, ordering: .relaxed) }
}

/// Closes a connection accepted beyond the listener's cap, right after it becomes active (the
/// HTTP handlers see an ordinary client that hung up). Hummingbird's own cap, which pauses
/// accepting instead, crashed a test run in NIO's async writer ("deinited without calling
/// finish") on a connection accepted while the listener stopped.
final class ConnectionCapHandler: ChannelInboundHandler, RemovableChannelHandler, Sendable {
    typealias InboundIn = NIOAny
    private let open: OpenConnections

    init(open: OpenConnections) { self.open = open }

    func channelActive(context: ChannelHandlerContext) {
        let admitted = open.open()
        context.fireChannelActive()
        if !admitted { context.close(promise: nil) }
    }

    func channelInactive(context: ChannelHandlerContext) {
        open.close()
        context.fireChannelInactive()
    }
}

public enum HTTPListenerError: Error, CustomStringConvertible {
    case cannotListen(address: ListenAddress, reason: String)

    public var description: String {
        switch self {
        case .cannotListen(let address, let reason): "FLEET_HTTP_ADDRESS: cannot listen on \(address): \(reason)"
        }
    }
}

/// The listener's port, set once; readers wait for it.
final class BoundPort: Sendable {
    private enum State {
        case waiting([CheckedContinuation<Int?, Never>])
        case resolved(Int?)
    }

    private let state = Mutex(State.waiting([]))

    /// Sets the port unless already set; returns whether it had been set before.
    @discardableResult
    func resolve(_ port: Int?) -> Bool {
        let waiting: [CheckedContinuation<Int?, Never>]? = state.withLock { state in
            guard case .waiting(let continuations) = state else { return nil }
            state = .resolved(port)
            return continuations
        }
        guard let waiting else { return true }
        for continuation in waiting { continuation.resume(returning: port) }
        return false
    }

    func value() async -> Int? {
        await withCheckedContinuation { continuation in
            let ready: Int?? = state.withLock { state in
                switch state {
                case .resolved(let port): return .some(port)
                case .waiting(let continuations):
                    state = .waiting(continuations + [continuation])
                    return .none
                }
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}
