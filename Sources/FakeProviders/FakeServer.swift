import Foundation
import Hummingbird
import Logging
import NIOCore
import ServiceLifecycle

/// A Hummingbird server on 127.0.0.1 with a kernel-chosen port, for one fake provider.
/// Stop it with `stop()`; a test that forgets leaks only a listening socket on loopback.
public final class FakeServer: Sendable {
    public let port: Int
    private let group: ServiceGroup
    private let task: Task<Void, any Error>

    /// How long `stop()` lets requests in progress finish before it cancels them (a fake told to
    /// hang never answers).
    static let gracePeriod: Duration = .seconds(2)

    public var baseURL: String { "http://127.0.0.1:\(port)" }

    private init(port: Int, group: ServiceGroup, task: Task<Void, any Error>) {
        self.port = port
        self.group = group
        self.task = task
    }

    public static func start<Context: RequestContext>(
        router: Router<Context>
    ) async throws -> FakeServer where Context.Source == ApplicationRequestContextSource {
        let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
        var logger = Logger(label: "fake-provider")
        logger.logLevel = .critical
        let application = Application(
            router: router,
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
        return FakeServer(port: port, group: group, task: task)
    }

    /// Stops accepting, then waits for the connections already accepted. Cancelling the server
    /// outright is not safe: a connection NIO accepted but the server had not yet taken from its
    /// queue is dropped unfinished, and NIO traps ("Deinited NIOAsyncWriter without calling
    /// finish()", apple/swift-nio#3481). After the graceful shutdown has closed the listening
    /// socket, cancelling what still runs past the grace period is safe.
    public func stop() async {
        await group.triggerGracefulShutdown()
        let deadline = Task { [task] in
            try await Task.sleep(for: Self.gracePeriod)
            task.cancel()
        }
        _ = await task.result
        deadline.cancel()
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
