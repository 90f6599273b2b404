import DispatcherProtocol
import FleetPostgres
import FleetQueue
import Logging
import Renders
import ServiceLifecycle

/// Tells waiters when jobs or renders end, from the queue's `QueueChannel.finished` and the
/// renders' `RenderChannel.finished` notifications: `Waiters` over one subscription to the
/// process's `Notifier`. Notifications sent while its connection was down are lost, so every
/// (re)connection wakes every waiter to look again. A render's notification follows its ending
/// commit (see `RenderStore.complete`) and is lost if its sender dies in between, so render
/// waiters also look again every `recheckInterval`.
public final class FinishWatcher: Service, Sendable {
    /// What a waiter waits for.
    public enum Watched: Hashable, Sendable {
        case job(Int64)
        case render(String)
    }

    let waiters: Waiters<Watched>

    /// How often render waiters look again (`docs/protocol.md`, `render.wait`).
    public static let defaultRecheckInterval = Duration.seconds(5)

    public init(notifier: Notifier, recheckInterval: Duration = FinishWatcher.defaultRecheckInterval, logger: Logger = Logger(label: "finish-watcher")) {
        waiters = Waiters(
            notifier: notifier,
            routes: [
                .init(QueueChannel.finished) { $0.map(Watched.job) },
                .init(RenderChannel.finished) { [.render($0)] },
            ],
            recheck: .init(every: recheckInterval) { if case .render = $0 { true } else { false } },
            logger: logger)
    }

    /// Reads `read` until `isDone` says the value is final, looking again at each wake-up for
    /// `watched`; returns the last value and whether the timeout (or shutdown) came first.
    /// Watching starts before the first read, so an end in between still wakes it.
    func wait<Value: Sendable>(
        for watched: Watched, timeoutMs: Int?, read: @Sendable () async throws -> Value, isDone: (Value) -> Bool
    ) async throws -> (value: Value, timedOut: Bool) {
        let timeoutMs = timeoutMs ?? WaitRequest.defaultTimeoutMs
        guard (0...WaitRequest.maxTimeoutMs).contains(timeoutMs) else {
            throw DispatcherError(.badArgument, "timeoutMs must be between 0 and \(WaitRequest.maxTimeoutMs)")
        }
        return try await waiters.wait(for: watched, timeout: .milliseconds(timeoutMs), read: read, isDone: isDone)
    }

    /// Listens until cancelled or shut down.
    public func run() async {
        await waiters.run()
    }
}
