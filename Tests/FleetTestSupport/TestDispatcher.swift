@testable import DispatcherCore
@testable import FleetPostgres
@testable import DispatcherProtocol
import FleetStorage
import FleetSupport
import Foundation
import NIOCore
import NIOPosix
import ServiceLifecycle
@testable import Renders

/// A dispatcher served in-process (TCP on a free port and a Unix socket) over a fresh database,
/// for the duration of `body`.
struct TestDispatcher: Sendable {
    static let token = "test-token-0123456789"

    let queue: TestQueue
    let tcp: DispatcherAddress
    let unix: DispatcherAddress
    let settings: DispatcherSettings
    /// The group commit of single enqueues; nil when the settings turn it off.
    let batcher: EnqueueBatcher?
    /// What `wait` and `render.wait` park on.
    let watcher: FinishWatcher

    static func run(
        cluster: PostgresCluster = .shared,
        _ configure: (inout DispatcherSettings) -> Void = { _ in }, renderSettings: RenderRequestSettings = RenderRequestSettings(),
        renderRecheck: Duration = FinishWatcher.defaultRecheckInterval, storage: StorageLocation = .files(root: ".data/images"),
        _ body: (TestDispatcher) async throws -> Void
    ) async throws {
        let queue = try await TestQueue.make(cluster: cluster)
        var settings = try DispatcherSettings.load(from: [:])
        settings.tcp = .tcp(host: "127.0.0.1", port: 0)
        settings.socketPath = temporaryPath("dispatcher") + ".sock"
        settings.token = token
        configure(&settings)
        let notifier = Notifier(conninfo: queue.url, logger: testLogger)
        let stack = try await DispatcherStack.bind(
            pool: queue.pool, notifier: notifier, settings: settings, renderSettings: renderSettings,
            liveWorkerWithin: .seconds(90), renderRecheck: renderRecheck, storage: storage, logger: testLogger)
        let dispatcher = TestDispatcher(
            queue: queue, tcp: .tcp(host: "127.0.0.1", port: stack.server.tcpPort ?? 0), unix: .unix(path: settings.socketPath!),
            settings: settings, batcher: stack.batcher, watcher: stack.watcher)
        let group = ServiceGroup(configuration: .init(services: ([notifier] + stack.services).map { .init(service: $0) }, logger: testLogger))
        let running = Task { try await group.run() }
        do {
            try await body(dispatcher)
        } catch {
            await stop(group, running)
            throw error
        }
        await stop(group, running)
    }

    /// Shuts the dispatcher down gracefully (listeners closed first), then cancels what still runs
    /// after two seconds (a connection a test left open). Cancelling at once could drop a
    /// connection NIO had accepted but the server had not yet taken, which traps in NIO.
    private static func stop(_ group: ServiceGroup, _ running: Task<Void, any Error>) async {
        await group.triggerGracefulShutdown()
        let deadline = Task {
            try await Task.sleep(for: .seconds(2))
            running.cancel()
        }
        _ = await running.result
        deadline.cancel()
    }

    /// A client on the Unix socket (no token needed), or on TCP authenticated with the token.
    func client(_ transport: Transport = .unix, token: String? = TestDispatcher.token) async throws -> DispatcherClient {
        try await DispatcherClient.connect(to: transport == .unix ? unix : tcp, token: token)
    }

    /// Waits until `count` `wait`s or `render.wait`s are parked on the finish watcher for
    /// `watched`: an end from then on must wake them.
    func waitUntilWaited(_ watched: FinishWatcher.Watched, count: Int = 1) async throws {
        try await waitFor("\(count) waits on \(watched)") { watcher.waiters.wakeUpsWaiting(for: watched) >= count }
    }

    /// Waits until the dispatcher's token directory has read `token` from the table (it re-reads
    /// it every 2 s): a new connection authenticates with it.
    func waitUntilAccepted(token: String) async throws {
        try await waitFor("the dispatcher to accept a new token") { (try? await client(.tcp, token: token)) != nil }
    }

    /// Waits until the dispatcher's token directory has seen `token` revoked: a new connection
    /// with it is refused.
    func waitUntilRefused(token: String) async throws {
        try await waitFor("the dispatcher to refuse a revoked token") { (try? await client(.tcp, token: token)) == nil }
    }

    /// A connection that writes raw bytes and reads raw lines, for what the client would never send.
    func withRawConnection<T: Sendable>(_ transport: Transport = .tcp, _ body: (RawConnection) async throws -> T) async throws -> T {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(to: try socketAddress(transport)) { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(FrameReader(maxFrameBytes: 64 << 20))
                return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
            }
        }
        return try await channel.executeThenClose { inbound, outbound in
            try await body(RawConnection(lines: inbound.makeAsyncIterator(), outbound: outbound))
        }
    }

    private func socketAddress(_ transport: Transport) throws -> SocketAddress {
        switch transport == .unix ? unix : tcp {
        case .tcp(let host, let port): try SocketAddress(ipAddress: host, port: port)
        case .unix(let path): try SocketAddress(unixDomainSocketPath: path)
        }
    }
}

/// One raw connection: bytes out, lines in.
final class RawConnection {
    private var lines: NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator
    let outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>

    init(lines: NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator, outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>) {
        self.lines = lines
        self.outbound = outbound
    }

    func send(_ text: String) async throws { try await outbound.write(ByteBuffer(string: text)) }

    func send(_ bytes: [UInt8]) async throws { try await outbound.write(ByteBuffer(bytes: bytes)) }

    /// The next frame as JSON; nil once the server closed the connection.
    func next() async throws -> JSONValue? {
        do {
            guard let line = try await lines.next() else { return nil }
            return try JSONValue(json: String(buffer: line))
        } catch let error as ChannelError where error == .inputClosed || error == .eof {
            return nil
        }
    }

    /// The next frame, which must be there.
    func response() async throws -> JSONValue {
        guard let frame = try await next() else { throw TestFailure("the server closed the connection") }
        return frame
    }

    /// Reads the greeting.
    @discardableResult
    func greeting() async throws -> JSONValue {
        let frame = try await response()
        guard frame["type"] == .string("greeting") else { throw TestFailure("expected a greeting, got \(frame.jsonText)") }
        return frame
    }
}

extension JSONValue {
    /// `error.code` of a response frame.
    var errorCode: String? {
        if case .string(let code)? = self["error"]?["code"] { code } else { nil }
    }
}
