import CLibPQ
import Foundation
import Logging
import Synchronization

/// LISTEN on a dedicated session connection, read by a dedicated thread that waits on the
/// socket. It reconnects by itself; every (re)connection is reported as `.connected`, since
/// notifications sent while it was away are lost and the consumer should look for work.
/// Notifications are hints: the consumers always keep a poll as the guarantee.
public final class PostgresListener: Sendable {
    public enum Event: Sendable, Equatable {
        case connected
        case notification(channel: String, payload: String)
    }

    public let events: AsyncStream<Event>
    private let continuation: AsyncStream<Event>.Continuation
    private let conninfo: String
    private let channels: [String]
    private let logger: Logger
    private let stopped = Mutex(false)

    public init(conninfo: String, channels: [String], logger: Logger) {
        (events, continuation) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(10_000))
        self.conninfo = conninfo
        self.channels = channels
        self.logger = logger
    }

    public func start() {
        let thread = Thread { [self] in run() }
        thread.name = "postgres-listener"
        thread.start()
    }

    /// Ends the thread within one poll interval and finishes `events`.
    public func stop() {
        stopped.withLock { $0 = true }
    }

    private var isStopped: Bool { stopped.withLock { $0 } }

    private func run() {
        var backoff = 0.05
        while !isStopped {
            guard let connection = connect() else {
                Thread.sleep(forTimeInterval: backoff)
                backoff = min(backoff * 2, 2)
                continue
            }
            backoff = 0.05
            continuation.yield(.connected)
            listen(on: connection)
            PQfinish(connection)
            if !isStopped { logger.warning("LISTEN connection lost; reconnecting") }
        }
        continuation.finish()
    }

    private func connect() -> OpaquePointer? {
        let connection: OpaquePointer
        do {
            connection = try PostgresConnection.openHandle(conninfo, applicationName: "wearbloom-listener")
        } catch {
            logger.debug("LISTEN connection failed", metadata: ["error": "\(error)"])
            return nil
        }
        for channel in channels {
            let result = PQexec(connection, "LISTEN \"\(channel)\"")
            defer { PQclear(result) }
            guard PQresultStatus(result) == PGRES_COMMAND_OK else {
                PQfinish(connection)
                return nil
            }
        }
        return connection
    }

    /// Reads notifications until the link fails or `stop()` is called.
    private func listen(on connection: OpaquePointer) {
        var lastCheck = Date()
        while !isStopped {
            var descriptor = pollfd(fd: PQsocket(connection), events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, 250)
            if ready < 0 && errno != EINTR { return }
            if PQconsumeInput(connection) == 0 { return }
            while let notification = PQnotifies(connection) {
                continuation.yield(.notification(
                    channel: String(cString: notification.pointee.relname),
                    payload: String(cString: notification.pointee.extra)
                ))
                PQfreemem(notification)
            }
            // A silent link (no FIN, no RST) is only found by talking: check it every few seconds.
            if ready == 0 && Date().timeIntervalSince(lastCheck) > 5 {
                lastCheck = Date()
                let result = PQexec(connection, "SELECT 1")
                let healthy = PQresultStatus(result) == PGRES_TUPLES_OK
                PQclear(result)
                if !healthy { return }
            }
        }
    }
}
