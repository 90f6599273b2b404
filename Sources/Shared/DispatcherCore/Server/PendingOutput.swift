import Synchronization

/// Bytes of response frames a connection has made and not yet handed to the socket's pipeline
/// (which holds at most its write-buffer high-water mark more). The connection starts no new
/// request while they exceed a bound, so a client that does not read stops costing memory
/// instead of piling up answers. It also tells since when its frames have been waiting with
/// none taken: a client that reads nothing at all is found by that (`stalledSince`).
final class PendingOutput: Sendable {
    private struct State {
        var bytes = 0
        var waiters: [CheckedContinuation<Void, Never>] = []
        /// When the socket last took a frame while others waited, or when the wait began; nil
        /// while nothing waits.
        var waitingSince: ContinuousClock.Instant?
    }

    let limit: Int
    private let state = Mutex(State())

    init(limit: Int) { self.limit = limit }

    var bytes: Int { state.withLock { $0.bytes } }

    /// Since when frames have waited with no progress; nil while none waits.
    var stalledSince: ContinuousClock.Instant? { state.withLock { $0.waitingSince } }

    func add(_ count: Int) {
        state.withLock { state in
            if state.bytes == 0 { state.waitingSince = .now }
            state.bytes += count
        }
    }

    func remove(_ count: Int) {
        let ready = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.bytes -= count
            state.waitingSince = state.bytes == 0 ? nil : .now
            guard state.bytes <= limit else { return [] }
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        for waiter in ready { waiter.resume() }
    }

    /// Returns once the pending bytes are within the limit.
    func waitUntilWithinLimit() async {
        // Without a suspension when within: a continuation resumed at once still reschedules the task.
        guard state.withLock({ $0.bytes > limit }) else { return }
        await withCheckedContinuation { continuation in
            let now = state.withLock { state in
                if state.bytes <= limit { return true }
                state.waiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }
}
