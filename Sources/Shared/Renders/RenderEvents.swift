import FleetPostgres
import Logging
import ServiceLifecycle

/// Wakes renders waiting for their provider's callback: `Waiters` over a subscription to the
/// process's `Notifier` on `RenderChannel.events`, whose payload is the provider's request id. A
/// reconnect wakes every waiter (notifications may have been missed); waiters always also poll,
/// so a lost notification only delays a render. Run it as a service of the worker's group.
public final class RenderEvents: Service, Sendable {
    private let waiters: Waiters<String>

    public init(notifier: Notifier, logger: Logger = Logger(label: "render-events")) {
        waiters = Waiters(
            notifier: notifier, routes: [.init(RenderChannel.events) { [$0] }],
            // Announced while nobody waited (between a render's look at the table and its wait):
            // the next wait for it returns at once. A forgotten one only costs a poll.
            rememberingUnawaited: 10_000, logger: logger)
    }

    /// Returns when a callback for `requestID` is announced, or after `timeout`.
    public func wait(for requestID: String, timeout: Duration) async {
        await waiters.wait(for: requestID, timeout: timeout)
    }

    /// Subscribes and wakes waiters until cancelled or shut down.
    public func run() async {
        await waiters.run()
    }
}
