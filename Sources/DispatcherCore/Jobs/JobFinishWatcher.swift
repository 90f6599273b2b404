import Logging
import ServiceLifecycle
import Shared
import Synchronization

/// Tells waiters when jobs reach a terminal state, from the queue's `fleet_jobs_finished`
/// notifications on one LISTEN connection for the whole process. Notifications sent while
/// that connection was down are lost, so every (re)connection wakes every waiter to look again.
public final class JobFinishWatcher: Service, Sendable {
    private let conninfo: String
    private let logger: Logger
    private let waiters = Mutex<[Int64: [Int: AsyncStream<Void>.Continuation]]>([:])
    private let nextKey = Atomic<Int>(0)

    public init(conninfo: String, logger: Logger) {
        self.conninfo = conninfo
        self.logger = logger
    }

    /// A stream that yields whenever job `id` may have finished (wake-ups coalesce). Finish the
    /// continuation to stop watching.
    public func wakeUps(for id: Int64) -> (AsyncStream<Void>, AsyncStream<Void>.Continuation) {
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let key = nextKey.add(1, ordering: .relaxed).newValue
        waiters.withLock { $0[id, default: [:]][key] = continuation }
        continuation.onTermination = { [weak self] _ in
            self?.waiters.withLock { waiters in
                waiters[id]?[key] = nil
                if waiters[id]?.isEmpty == true { waiters[id] = nil }
            }
        }
        return (stream, continuation)
    }

    /// Listens until cancelled or shut down.
    public func run() async {
        let listener = PostgresListener(conninfo: conninfo, channels: [QueueChannel.finished], logger: logger)
        listener.start()
        defer { listener.stop() }
        for await event in listener.events.cancelOnGracefulShutdown() {
            switch event {
            case .connected:
                wake { _ in true }
            case .notification(_, let payload):
                let ids = Set(payload.split(separator: ",").compactMap { Int64($0) })
                wake { ids.contains($0) }
            }
        }
    }

    private func wake(_ which: (Int64) -> Bool) {
        waiters.withLock { waiters in
            for (id, continuations) in waiters where which(id) {
                for continuation in continuations.values { continuation.yield() }
            }
        }
    }
}
