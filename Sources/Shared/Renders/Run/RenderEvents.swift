import FleetPostgres
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// Wakes renders waiting for their provider's callback: `Waiters` over a subscription to the
/// process's `Notifier` on `RenderChannel.events`, keyed by the provider's request id. A
/// reconnect wakes every waiter (notifications may have been missed); waiters always also poll,
/// so a lost notification only delays a render. The callback's body, when its announcement
/// carries it (`CallbackAnnouncement`), is kept for the render of this process expecting it
/// (`expect`), which then reads no table. Run it as a service of the worker's group.
public final class RenderEvents: Service, Sendable {
    private let waiters: Waiters<String>
    private let awaited: AwaitedCallbacks

    public init(notifier: Notifier, logger: Logger = Logger(label: "render-events")) {
        let awaited = AwaitedCallbacks()
        self.awaited = awaited
        waiters = Waiters(
            notifier: notifier,
            routes: [.init(RenderChannel.events) { announcement in
                if let body = announcement.payload { awaited.keep(body, for: announcement.requestID) }
                return [announcement.requestID]
            }],
            // Announced while nobody waited (between a render's look at the table and its wait):
            // the next wait for it returns at once. A forgotten one only costs a poll.
            rememberingUnawaited: 10_000, logger: logger)
    }

    /// Returns when a callback for `requestID` is announced, or after `timeout`.
    public func wait(for requestID: String, timeout: Duration) async {
        await waiters.wait(for: requestID, timeout: timeout)
    }

    /// Keeps the body of `requestID`'s callback when its announcement carries it, until
    /// `forget`. An announcement heard before this call is not kept (the table has it).
    public func expect(_ requestID: String) { awaited.expect(requestID) }

    /// The body of `requestID`'s callback, if its announcement carried it since `expect`.
    public func callback(_ requestID: String) -> Data? { awaited.callback(requestID) }

    public func forget(_ requestID: String) { awaited.forget(requestID) }

    /// Subscribes and wakes waiters until cancelled or shut down.
    public func run() async {
        await waiters.run()
    }
}

/// By request id, the callbacks this process's renders wait for, with each body once announced:
/// only those are kept, so the bodies every worker hears cost memory only where awaited.
private final class AwaitedCallbacks: Sendable {
    private let bodies = Mutex<[String: Data?]>([:])

    func expect(_ requestID: String) {
        bodies.withLock { if $0[requestID] == nil { $0[requestID] = .some(nil) } }
    }

    func keep(_ body: Data, for requestID: String) {
        bodies.withLock { if $0[requestID] != nil { $0[requestID] = body } }
    }

    func callback(_ requestID: String) -> Data? { bodies.withLock { $0[requestID] ?? nil } }

    func forget(_ requestID: String) { _ = bodies.withLock { $0.removeValue(forKey: requestID) } }
}
