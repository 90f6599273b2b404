import Foundation
import Hummingbird
import Logging
import NIOCore

/// A Hummingbird server on 127.0.0.1 with a kernel-chosen port, for one fake provider.
/// Stop it with `stop()`; a test that forgets leaks only a listening socket on loopback.
public final class FakeServer: Sendable {
    public let port: Int
    private let task: Task<Void, any Error>

    public var baseURL: String { "http://127.0.0.1:\(port)" }

    private init(port: Int, task: Task<Void, any Error>) {
        self.port = port
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
            configuration: .init(address: .hostname("127.0.0.1", port: 0), serverName: nil),
            onServerRunning: { channel in
                continuation.yield(channel.localAddress?.port ?? 0)
                continuation.finish()
            },
            logger: logger
        )
        let task = Task { try await application.run() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next(), port > 0 else {
            task.cancel()
            throw FakeServerError.didNotStart
        }
        return FakeServer(port: port, task: task)
    }

    public func stop() async {
        task.cancel()
        _ = await task.result
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
