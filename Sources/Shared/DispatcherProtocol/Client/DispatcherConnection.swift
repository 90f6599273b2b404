import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// Everything needed to open a connection to the dispatcher, again and again.
struct ConnectionSettings: Sendable {
    let address: DispatcherAddress
    let token: String?
    let tlsContext: NIOSSLContext?
    let maxFrameBytes: Int
    let connectTimeout: Duration
    let reconnect: ReconnectPolicy
    let group: any EventLoopGroup
}

/// One of the client's connections, reopened when it ended: each request asks it for a live
/// channel; the first request after the end opens a new one (greeting checked, token sent again)
/// and those that come meanwhile wait for that same attempt.
final class DispatcherConnection: Sendable {
    struct Live: Sendable {
        let channel: any Channel
        let greeting: Greeting
    }

    private enum Next {
        case ready(Live)
        case opening(Task<Live, any Error>)
    }

    private struct State {
        var live: Live
        var opening: Task<Live, any Error>?
        var closed = false
    }

    private let settings: ConnectionSettings
    private let state: Mutex<State>

    private init(settings: ConnectionSettings, live: Live) {
        self.settings = settings
        self.state = Mutex(State(live: live))
    }

    /// Opens the first connection once, without retrying: a wrong address, token or server is
    /// the caller's to hear about at once.
    static func open(_ settings: ConnectionSettings) async throws -> DispatcherConnection {
        DispatcherConnection(settings: settings, live: try await openChannel(settings))
    }

    var greeting: Greeting { state.withLock { $0.live.greeting } }

    /// Whether its channel is open now (it is opened again on the next request if not).
    var isUp: Bool { state.withLock { !$0.closed && $0.live.channel.isActive } }

    /// A connection that is up, opened again if it ended.
    func live() async throws -> Live {
        let next: Next = try state.withLock { state in
            if state.closed { throw DispatcherClientError.connectionClosed }
            if state.live.channel.isActive { return .ready(state.live) }
            guard settings.reconnect.enabled else { throw DispatcherClientError.connectionClosed }
            if let opening = state.opening { return .opening(opening) }
            let opening = Task { try await self.reopen() }
            state.opening = opening
            return .opening(opening)
        }
        switch next {
        case .ready(let live): return live
        case .opening(let task): return try await task.value
        }
    }

    func close() async {
        let (channel, opening) = state.withLock { state in
            state.closed = true
            return (state.live.channel, state.opening)
        }
        opening?.cancel()
        try? await channel.close()
        if let reopened = try? await opening?.value { try? await reopened.channel.close() }
    }

    /// Attempts until one succeeds, the policy's timeout passes, or the dispatcher refuses for
    /// a reason that waiting does not change (a token it no longer accepts, another protocol).
    private func reopen() async throws -> Live {
        let clock = ContinuousClock()
        let deadline = clock.now + settings.reconnect.timeout
        var attempt = 0
        defer { state.withLock { $0.opening = nil } }
        while true {
            do {
                try Task.checkCancellation()
                let live = try await Self.openChannel(settings)
                let kept = state.withLock { state -> Bool in
                    guard !state.closed else { return false }
                    state.live = live
                    return true
                }
                guard kept else {
                    try? await live.channel.close()
                    throw DispatcherClientError.connectionClosed
                }
                return live
            } catch let error as DispatcherError where error.code == .unauthenticated {
                throw error
            } catch let error as DispatcherClientError {
                if case .incompatibleServer = error { throw error }
                if error == .connectionClosed, state.withLock({ $0.closed }) { throw error }
                try await pause(&attempt, until: deadline, after: error)
            } catch is CancellationError {
                throw DispatcherClientError.connectionClosed
            } catch {
                try await pause(&attempt, until: deadline, after: error)
            }
        }
    }

    /// The backoff before the next attempt; a backoff that would pass the deadline is cut to it,
    /// for one last attempt there: giving up at once when the draw overshot made a 1.5 s timeout
    /// fail after 0.25 s.
    private func pause(_ attempt: inout Int, until deadline: ContinuousClock.Instant, after error: any Error) async throws {
        attempt += 1
        let now = ContinuousClock.now
        guard now < deadline else {
            throw DispatcherClientError.notConnected(seconds: Int(settings.reconnect.timeout.components.seconds), lastError: "\(error)")
        }
        let wake = min(now + settings.reconnect.backoff(beforeAttempt: attempt), deadline)
        do {
            try await Task.sleep(until: wake)
        } catch {
            throw DispatcherClientError.connectionClosed
        }
    }

    /// Connects, reads the greeting, and authenticates with the token when the server requires it.
    private static func openChannel(_ settings: ConnectionSettings) async throws -> Live {
        let bootstrap = ClientBootstrap(group: settings.group)
            .connectTimeout(.nanoseconds(Int64(Double(settings.connectTimeout.components.seconds) * 1e9
                + Double(settings.connectTimeout.components.attoseconds) / 1e9)))
        let address = settings.address
        let initialize: @Sendable (any Channel) -> EventLoopFuture<(any Channel, EventLoopFuture<ByteBuffer>)> = { channel in
            channel.eventLoop.makeCompletedFuture {
                let greeting = channel.eventLoop.makePromise(of: ByteBuffer.self)
                if let tlsContext = settings.tlsContext, case .tcp(let host, _) = address {
                    try channel.pipeline.syncOperations.addHandler(
                        try NIOSSLClientHandler(context: tlsContext, serverHostname: DispatcherTLS.Client.serverName(host)))
                }
                try channel.pipeline.syncOperations.addHandlers(
                    FrameReader(maxFrameBytes: settings.maxFrameBytes), ResponseRouter(greeting: greeting))
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
            if greeting.authRequired, let token = settings.token {
                _ = try await ChannelExchange.send(AuthRequest(token: token), id: 0, traceparent: nil, on: channel, encoder: WireFormat.makeEncoder(), decoder: decoder)
            }
            return Live(channel: channel, greeting: greeting)
        } catch is ConnectionEnded {
            // Closed under the auth (a server restarting, an idle close): the public error.
            try? await channel.close()
            throw DispatcherClientError.connectionClosed
        } catch {
            try? await channel.close()
            throw error
        }
    }
}
