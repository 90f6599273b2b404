import Foundation
import Hummingbird
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization

/// A Hummingbird server on 127.0.0.1 with a kernel-chosen port, for one fake provider.
/// Stop it with `stop()`; a test that forgets leaks only a listening socket on loopback.
public final class FakeServer: Sendable {
    public let port: Int
    private let group: ServiceGroup
    private let task: Task<Void, any Error>
    private let stopping: StopFlag

    /// How long `stop()` waits for requests in progress before it cancels the server, a last
    /// resort: slow handlers (`FakeServer.pause`) end when the stop starts, so only a handler
    /// stuck elsewhere is waited for this long.
    static let gracePeriod: Duration = .seconds(30)

    public var baseURL: String { "http://127.0.0.1:\(port)" }

    private init(port: Int, group: ServiceGroup, task: Task<Void, any Error>, stopping: StopFlag) {
        self.port = port
        self.group = group
        self.task = task
        self.stopping = stopping
    }

    public static func start<Context: RequestContext>(
        router: Router<Context>
    ) async throws -> FakeServer where Context.Source == ApplicationRequestContextSource {
        let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
        var logger = Logger(label: "fake-provider")
        logger.logLevel = .critical
        let stopping = StopFlag()
        let application = Application(
            responder: StopAwareResponder(wrapped: router.buildResponder(), stopping: stopping),
            // A backlog of 256 (Hummingbird's default) drops the SYNs of a burst of hundreds of
            // connects, and the kernel retries them after 1, 3, 7 s: a load test's clients time out.
            configuration: .init(address: .hostname("127.0.0.1", port: 0), serverName: nil, backlog: 4096),
            onServerRunning: { channel in
                continuation.yield(channel.localAddress?.port ?? 0)
                continuation.finish()
            },
            logger: logger
        )
        let group = ServiceGroup(configuration: .init(services: [application], logger: logger))
        let task = Task { try await group.run() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next(), port > 0 else {
            task.cancel()
            throw FakeServerError.didNotStart
        }
        return FakeServer(port: port, group: group, task: task, stopping: stopping)
    }

    /// Stops accepting, ends the handlers waiting in `pause`, then waits for the connections
    /// already accepted. Cancelling the server while it runs is not safe: a connection NIO
    /// accepted but the server had not yet taken from its queue is dropped unfinished, and NIO
    /// traps ("Deinited NIOAsyncWriter without calling finish()", apple/swift-nio#3481). A 2 s
    /// cancel after the graceful shutdown still trapped on this loaded 2-core machine (the
    /// accept loop had not run yet), so the cancel is only a last resort.
    /// - Returns: how the server ended, so a test can tell a graceful stop from the last resort.
    @discardableResult
    public func stop() async -> StopOutcome {
        stopping.raise()
        await group.triggerGracefulShutdown()
        let cancelled = Atomic(false)
        let deadline = Task { [task] in
            try await Task.sleep(for: Self.gracePeriod)
            cancelled.store(true, ordering: .relaxed)
            task.cancel()
        }
        _ = await task.result
        deadline.cancel()
        return cancelled.load(ordering: .relaxed) ? .cancelledAfterGracePeriod : .graceful
    }

    public enum StopOutcome: Sendable, Equatable {
        /// Every connection ended by the graceful shutdown.
        case graceful
        /// A request still ran after `gracePeriod`, and the server was cancelled.
        case cancelledAfterGracePeriod
    }

    /// Waits `duration` as a slow or hanging provider does, unless the server serving this
    /// request stops first (then throws `CancellationError`): a fake's handler calls this, not
    /// `Task.sleep`, so stopping the fake never waits for a request told to hang.
    public static func pause(for duration: Duration) async throws {
        let until = ContinuousClock.now + duration
        while ContinuousClock.now < until {
            if stoppingServer?.isRaised == true { throw CancellationError() }
            try await Task.sleep(for: min(.milliseconds(50), until - .now))
        }
    }

    /// The stop flag of the server whose request this task is handling.
    @TaskLocal static var stoppingServer: StopFlag?
}

/// Raised once when a fake server starts stopping.
final class StopFlag: Sendable {
    private let raised = Atomic(false)
    var isRaised: Bool { raised.load(ordering: .relaxed) }
    func raise() { raised.store(true, ordering: .relaxed) }
}

/// Runs each request with its server's stop flag in reach of `FakeServer.pause`.
struct StopAwareResponder<Wrapped: HTTPResponder>: HTTPResponder {
    let wrapped: Wrapped
    let stopping: StopFlag

    func respond(to request: Request, context: Wrapped.Context) async throws -> Response {
        try await FakeServer.$stoppingServer.withValue(stopping) { try await wrapped.respond(to: request, context: context) }
    }
}

public enum FakeServerError: Error {
    case didNotStart
}

/// A request context that knows the client's address, so a fake can tell connections apart.
public struct PeerRequestContext: RequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let remoteAddress: SocketAddress?

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }
}
