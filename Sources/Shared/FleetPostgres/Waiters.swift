import Logging
import ServiceLifecycle
import Synchronization

/// Who waits for what, woken by notifications: a waiter waits for a key (a job's id, a render's,
/// a provider's request id), a notification on one of `routes`' topics wakes the waiters of the
/// keys its payload names, and `.mightHaveMissed` (the subscription is new, or the LISTEN
/// connection came back) wakes every waiter to look again. Wake-ups are hints: a waiter always
/// reads the truth itself, and a timeout bounds every wait. Run it as a service of the process's
/// group, after the `Notifier` (so it stops before it). Used by the dispatcher's `FinishWatcher`
/// and the render worker's `RenderEvents`.
public final class Waiters<Key: Hashable & Sendable>: Service, Sendable {
    /// How a notification on one topic names the keys it wakes.
    public struct Route: Sendable {
        let channel: String
        let keys: @Sendable (String) -> [Key]?

        public init<Payload>(_ topic: NotificationTopic<Payload>, keys: @escaping @Sendable (Payload) -> [Key]) {
            channel = topic.name
            self.keys = { topic.decode($0).map(keys) }
        }
    }

    /// Wakes the waiters of the keys `which` selects every `interval`, for notifications their
    /// sender can lose (sent after its commit, lost if it dies in between).
    public struct Recheck: Sendable {
        public let interval: Duration
        public let which: @Sendable (Key) -> Bool

        public init(every interval: Duration, which: @escaping @Sendable (Key) -> Bool) {
            self.interval = interval
            self.which = which
        }
    }

    /// A waiter's wake-ups: `events` yields whenever its key may have happened (wake-ups
    /// coalesce); `stop()` ends them and forgets the waiter.
    public struct WakeUps: Sendable {
        public let events: AsyncStream<Void>
        fileprivate let continuation: AsyncStream<Void>.Continuation

        public func stop() { continuation.finish() }
    }

    private let notifier: Notifier
    private let routes: [String: Route]
    private let recheck: Recheck?
    private let remembering: Int
    private let logger: Logger
    private let state = Mutex(State())

    private struct State {
        var waiting: [Key: [Int: AsyncStream<Void>.Continuation]] = [:]
        var nextID = 0
        /// Woken while nobody waited for them; the next waiter of one is woken at once.
        var unawaited: Set<Key> = []
    }

    /// `rememberingUnawaited`: how many wake-ups of keys nobody waits for to keep for the next
    /// waiter (for a waiter that looks, then waits: an announcement in between is not lost);
    /// past it they are all forgotten, which costs their waiters a timeout. 0 keeps none.
    public init(notifier: Notifier, routes: [Route], recheck: Recheck? = nil, rememberingUnawaited: Int = 0, logger: Logger) {
        self.notifier = notifier
        self.routes = Dictionary(routes.map { ($0.channel, $0) }, uniquingKeysWith: { first, _ in first })
        self.recheck = recheck
        self.remembering = rememberingUnawaited
        self.logger = logger
    }

    // MARK: Waiting

    /// Starts watching `key`. Stop the wake-ups when done.
    public func wakeUps(for key: Key) -> WakeUps {
        let (events, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let (id, announced) = state.withLock { state in
            state.nextID += 1
            state.waiting[key, default: [:]][state.nextID] = continuation
            return (state.nextID, state.unawaited.remove(key) != nil)
        }
        continuation.onTermination = { [weak self] _ in
            self?.state.withLock { state in
                state.waiting[key]?[id] = nil
                if state.waiting[key]?.isEmpty == true { state.waiting[key] = nil }
            }
        }
        if announced { continuation.yield() }
        return WakeUps(events: events, continuation: continuation)
    }

    /// Returns when `key` is woken (true) or after `timeout` (false).
    @discardableResult
    public func wait(for key: Key, timeout: Duration) async -> Bool {
        let wakeUps = wakeUps(for: key)
        defer { wakeUps.stop() }
        return await withTaskGroup(of: Bool.self) { group in
            group.addTask { await wakeUps.events.first { _ in true } != nil }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return false
            }
            defer { group.cancelAll() }
            return await group.next() ?? false
        }
    }

    /// Reads `read` until `isDone` says the value is final, looking again at each wake-up of
    /// `key`; returns the last value and whether `timeout` (or a graceful shutdown) came first.
    /// Watching starts before the first read, so an end in between still wakes it. A read that
    /// fails for a transient database reason is run again (`retryingTransient`).
    public func wait<Value: Sendable>(
        for key: Key, timeout: Duration, read: @Sendable () async throws -> Value, isDone: (Value) -> Bool
    ) async throws -> (value: Value, timedOut: Bool) {
        let deadline = ContinuousClock.now + timeout
        let wakeUps = wakeUps(for: key)
        defer { wakeUps.stop() }
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                // The deadline (or shutdown) ends the wake-ups, which ends the wait.
                try? await cancelWhenGracefulShutdown { try await Task.sleep(for: timeout) }
                wakeUps.stop()
            }
            defer { group.cancelAll() }
            var wakeUp = wakeUps.events.makeAsyncIterator()
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

    /// How many wake-ups of `key` are open.
    func wakeUpsWaiting(for key: Key) -> Int { state.withLock { $0.waiting[key]?.count ?? 0 } }

    // MARK: Waking

    /// What an event of the subscription means for the waiters. A payload its topic does not
    /// decode is logged and ignored.
    public func receive(_ event: NotifierEvent) {
        switch event {
        case .mightHaveMissed:
            wake { _ in true }
        case .notification(let channel, let payload):
            guard let keys = routes[channel]?.keys(payload) else {
                logger.warning("notification of an unknown shape ignored", metadata: [
                    "channel": "\(channel)", "payload": "\(payload.prefix(200))",
                ])
                return
            }
            wake(keys)
        }
    }

    /// Wakes the waiters of `keys`; a key nobody waits for is remembered (`rememberingUnawaited`).
    public func wake(_ keys: some Sequence<Key>) {
        state.withLock { state in
            for key in keys {
                if let waiters = state.waiting[key] {
                    for waiter in waiters.values { waiter.yield() }
                } else if remembering > 0 {
                    if state.unawaited.count >= remembering { state.unawaited.removeAll() }
                    state.unawaited.insert(key)
                }
            }
        }
    }

    /// Wakes the waiters of every key `which` selects.
    public func wake(where which: (Key) -> Bool) {
        state.withLock { state in
            for (key, waiters) in state.waiting where which(key) {
                for waiter in waiters.values { waiter.yield() }
            }
        }
    }

    /// Subscribes to the routes' topics and wakes waiters until cancelled or shut down.
    public func run() async {
        let subscription = notifier.subscribe(to: routes.keys.sorted())
        defer { subscription.unsubscribe() }
        await withTaskGroup(of: Void.self) { group in
            if let recheck {
                group.addTask {
                    while (try? await Task.sleep(for: recheck.interval)) != nil { self.wake(where: recheck.which) }
                }
            }
            for await event in subscription.events.cancelOnGracefulShutdown() { receive(event) }
            group.cancelAll()
        }
    }
}
