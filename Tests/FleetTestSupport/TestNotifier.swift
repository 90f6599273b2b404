import FleetPostgres

/// A notifier of the test's own, running from its creation until `stop()`.
struct TestNotifier: Sendable {
    let notifier: Notifier
    private let running: Task<Void, Never>

    init(url: String, applicationName: String = "wearbloom-listener") {
        let notifier = Notifier(conninfo: url, applicationName: applicationName, logger: testLogger)
        self.notifier = notifier
        running = Task { await notifier.run() }
    }

    /// The events of a new subscription to `channels`.
    func events(_ channels: [String]) -> AsyncStream<NotifierEvent>.AsyncIterator {
        notifier.subscribe(to: channels).events.makeAsyncIterator()
    }

    /// The events of a new subscription to `topics`.
    func events(_ topics: [any NotificationChannel]) -> AsyncStream<NotifierEvent>.AsyncIterator {
        notifier.subscribe(to: topics).events.makeAsyncIterator()
    }

    /// Stops it: the connection closes and every subscription's events end.
    func stop() { running.cancel() }
}
