import Foundation
import Synchronization

/// The render worker's completed run times per provider, written to `provider_latency` at most
/// once per `flushInterval` (`RenderCapacity.recordLatencies`) instead of once per render: a
/// statement per render was the fleet's busiest single-row write (every render of a provider
/// updates the one row), for an estimate that admission control reads and that moves slowly.
/// What a process gathered since its last write is lost if it dies: an estimate a second older.
public final class ProviderLatencySamples: Sendable {
    private let flushInterval: Duration
    private let state: Mutex<State>

    private struct State {
        var pending: [String: [Duration]] = [:]
        var lastFlush: ContinuousClock.Instant
        var flushing = false
    }

    /// The first sample is written at once when it comes `flushInterval` after start: admission
    /// has its first estimate early.
    public init(flushInterval: Duration = .seconds(1)) {
        self.flushInterval = flushInterval
        state = Mutex(State(lastFlush: .now - flushInterval))
    }

    /// Adds one completed render's run time, then writes what gathered when it is time (one
    /// writer at a time; the others only add).
    public func record(provider: String, _ latency: Duration, to capacity: RenderCapacity) async throws {
        let due: [String: [Duration]]? = state.withLock { state in
            state.pending[provider, default: []].append(latency)
            let now = ContinuousClock.now
            guard !state.flushing, now - state.lastFlush >= flushInterval else { return nil }
            state.flushing = true
            state.lastFlush = now
            defer { state.pending = [:] }
            return state.pending
        }
        guard let due else { return }
        defer { state.withLock { $0.flushing = false } }
        for (provider, samples) in due.sorted(by: { $0.key < $1.key }) {
            try await capacity.recordLatencies(provider: provider, samples)
        }
    }
}
