import Synchronization

/// When a connection last did something, and how many of its requests are running: a
/// connection is idle when nothing is in flight and nothing has arrived for a while.
final class ConnectionActivity: Sendable {
    private struct State {
        var inFlight = 0
        var lastActivity = ContinuousClock.now
    }

    private let state = Mutex(State())

    func touch() { state.withLock { $0.lastActivity = .now } }

    func begin() { state.withLock { $0.inFlight += 1 } }

    func end() {
        state.withLock {
            $0.inFlight -= 1
            $0.lastActivity = .now
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
