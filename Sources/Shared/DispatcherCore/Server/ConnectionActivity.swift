import Synchronization

/// When a connection last did something, and how many of its requests are running: a
/// connection is idle when nothing is in flight and nothing has arrived for a while. The
/// connection's reading task also waits here for a request to end, whether it runs in a task or
/// answers through a callback.
final class ConnectionActivity: Sendable {
    private struct State {
        var inFlight = 0
        var lastActivity = ContinuousClock.now
        /// The reading task, waiting for `inFlight` to come down to `waitingFor`.
        var waiter: (waitingFor: Int, continuation: CheckedContinuation<Void, Never>)?
    }

    private let state = Mutex(State())

    func touch() { state.withLock { $0.lastActivity = .now } }

    func begin() { state.withLock { $0.inFlight += 1 } }

    func end() {
        let ready = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.inFlight -= 1
            state.lastActivity = .now
            guard let waiter = state.waiter, state.inFlight <= waiter.waitingFor else { return nil }
            state.waiter = nil
            return waiter.continuation
        }
        ready?.resume()
    }

    /// Returns once at most `count` requests are in flight. One task waits at a time (the
    /// connection's reading task, the only one that begins requests).
    func waitUntilInFlight(atMost count: Int) async {
        // Without a suspension when already so: a continuation resumed at once still reschedules the task.
        guard state.withLock({ $0.inFlight > count }) else { return }
        await withCheckedContinuation { continuation in
            let now = state.withLock { state in
                if state.inFlight <= count { return true }
                precondition(state.waiter == nil, "two tasks wait for a connection's requests")
                state.waiter = (count, continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// When the connection becomes idle if nothing happens meanwhile; nil if it already is.
    func idleDeadline(after timeout: Duration) -> ContinuousClock.Instant? {
        state.withLock { state in
            guard state.inFlight == 0 else { return .now + timeout }
            let deadline = state.lastActivity + timeout
            return deadline <= .now ? nil : deadline
        }
    }
}
