import DispatcherProtocol
import FleetPostgres
import FleetQueue
import Renders
import ServiceLifecycle
import Synchronization

/// Tells waiters when jobs or renders end, from the queue's `fleet_jobs_finished` and the
/// renders' `fleet_renders_finished` notifications: one subscription to the process's
/// `Notifier`. Notifications sent while its connection was down are lost, so every
/// (re)connection wakes every waiter to look again. A render's notification follows its ending
/// commit (see `RenderStore.complete`) and is lost if its sender dies in between, so render
/// waiters also look again every `recheckInterval`.
public final class FinishWatcher: Service, Sendable {
    /// What a waiter waits for.
    public enum Watched: Hashable, Sendable {
        case job(Int64)
        case render(String)
    }

    private let notifier: Notifier
    private let recheckInterval: Duration
    private let waiters = Mutex<[Watched: [Int: AsyncStream<Void>.Continuation]]>([:])
    private let nextKey = Atomic<Int>(0)

    /// How often render waiters look again (`docs/protocol.md`, `render.wait`).
    public static let defaultRecheckInterval = Duration.seconds(5)

    public init(notifier: Notifier, recheckInterval: Duration = FinishWatcher.defaultRecheckInterval) {
        self.notifier = notifier
        self.recheckInterval = recheckInterval
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
        let deadline = ContinuousClock.now + .milliseconds(timeoutMs)
        let (wakeUps, watching) = self.wakeUps(for: watched)
        defer { watching.finish() }
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                // The deadline (or shutdown) ends the wake-ups, which ends the wait.
                try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .milliseconds(timeoutMs)) }
                watching.finish()
            }
            defer { group.cancelAll() }
            var wakeUp = wakeUps.makeAsyncIterator()
            while true {
                let value = try await Self.retryingTransient(until: deadline, read)
                if isDone(value) { return (value, false) }
                if await wakeUp.next() == nil {
                    let value = try await Self.retryingTransient(until: deadline, read)
                    return (value, !isDone(value))
                }
            }
        }
    }

    /// Runs `read` again while it fails for a transient database reason (a restart, a lost
    /// link), until `deadline`: a restart shorter than what is left of the wait's timeout is
    /// invisible to the waiter. The listener's reconnection wakes every waiter anyway, so a
    /// notification lost during the restart costs nothing either.
    static func retryingTransient<Value>(
        until deadline: ContinuousClock.Instant, _ read: () async throws -> Value
    ) async throws -> Value {
        var delay = Duration.milliseconds(50)
        while true {
            do {
                return try await read()
            } catch let error as PostgresError where error.isTransient && ContinuousClock.now + delay < deadline {
                try await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(1))
            }
        }
    }

    /// A stream that yields whenever `watched` may have ended (wake-ups coalesce). Finish the
    /// continuation to stop watching.
    func wakeUps(for watched: Watched) -> (AsyncStream<Void>, AsyncStream<Void>.Continuation) {
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let key = nextKey.add(1, ordering: .relaxed).newValue
        waiters.withLock { $0[watched, default: [:]][key] = continuation }
        continuation.onTermination = { [weak self] _ in
            self?.waiters.withLock { waiters in
                waiters[watched]?[key] = nil
                if waiters[watched]?.isEmpty == true { waiters[watched] = nil }
            }
        }
        return (stream, continuation)
    }

    /// Listens until cancelled or shut down.
    public func run() async {
        let subscription = notifier.subscribe(to: [QueueChannel.finished, RenderChannel.finished])
        defer { subscription.unsubscribe() }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.recheckRenders() }
            for await event in subscription.events.cancelOnGracefulShutdown() {
                switch event {
                case .mightHaveMissed:
                    wake { _ in true }
                case .notification(QueueChannel.finished, let payload):
                    let ids = Set(payload.split(separator: ",").compactMap { Int64($0) }.map(Watched.job))
                    wake { ids.contains($0) }
                case .notification(_, let renderID):
                    wake { $0 == .render(renderID) }
                }
            }
            group.cancelAll()
        }
    }

    /// Wakes every render waiter each `recheckInterval` until cancelled.
    private func recheckRenders() async {
        while (try? await Task.sleep(for: recheckInterval)) != nil {
            wake { if case .render = $0 { true } else { false } }
        }
    }

    private func wake(_ which: (Watched) -> Bool) {
        waiters.withLock { waiters in
            for (watched, continuations) in waiters where which(watched) {
                for continuation in continuations.values { continuation.yield() }
            }
        }
    }
}
