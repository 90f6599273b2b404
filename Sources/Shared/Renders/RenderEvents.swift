import FleetPostgres
import Foundation
import Synchronization

/// Wakes renders waiting for their provider's callback: a subscription to the process's
/// `Notifier` on `fleet_render_events`, whose payload is the provider's request id. A reconnect
/// wakes every waiter (notifications may have been missed); waiters always also poll, so a lost
/// notification only delays a render.
public final class RenderEvents: Sendable {
    private let notifier: Notifier
    private let state = Mutex(State())

    private struct State {
        var waiters: [String: [UUID: CheckedContinuation<Void, Never>]] = [:]
        /// Announced while nobody waited (between a render's look at the table and its wait):
        /// the next wait for it returns at once. Bounded; a forgotten entry only costs a poll.
        var early: Set<String> = []
    }

    public init(notifier: Notifier) {
        self.notifier = notifier
    }

    /// Subscribes; the returned task dispatches notifications until cancelled (which unsubscribes).
    public func start() -> Task<Void, Never> {
        let events = notifier.subscribe(to: [RenderChannel.events]).events
        return Task { [self] in
            for await event in events {
                switch event {
                case .mightHaveMissed: wakeAll()
                case .notification(_, let requestID): wake(requestID)
                }
            }
        }
    }

    /// Returns when a callback for `requestID` is announced, or after `timeout`.
    public func wait(for requestID: String, timeout: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.notified(requestID) }
            group.addTask { try? await Task.sleep(for: timeout) }
            await group.next()
            group.cancelAll()
        }
    }

    private func notified(_ requestID: String) async {
        let token = UUID()
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let announced = state.withLock { state in
                    if state.early.remove(requestID) != nil { return true }
                    state.waiters[requestID, default: [:]][token] = continuation
                    return false
                }
                if announced { return continuation.resume() }
                // A cancel that came before the registration found nothing to resume: whoever
                // removes the continuation (here or in onCancel) resumes it, exactly once.
                if Task.isCancelled { state.withLock { $0.waiters[requestID]?.removeValue(forKey: token) }?.resume() }
            }
        } onCancel: {
            state.withLock { $0.waiters[requestID]?.removeValue(forKey: token) }?.resume()
        }
    }

    private func wake(_ requestID: String) {
        let woken = state.withLock { state in
            guard let woken = state.waiters.removeValue(forKey: requestID) else {
                if state.early.count >= 10_000 { state.early.removeAll() }
                state.early.insert(requestID)
                return [UUID: CheckedContinuation<Void, Never>]()
            }
            return woken
        }
        for continuation in woken.values { continuation.resume() }
    }

    private func wakeAll() {
        let woken = state.withLock { state in defer { state.waiters.removeAll() }; return state.waiters }
        for continuation in woken.values.flatMap(\.values) { continuation.resume() }
    }
}
