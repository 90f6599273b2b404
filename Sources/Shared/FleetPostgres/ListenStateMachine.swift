/// The LISTEN bookkeeping of the notifier's connection as a value (postgres-nio's
/// `ListenStateMachine`): subscriptions come and go, the connection is lost and comes back, and
/// it says which `LISTEN`/`UNLISTEN` to send next, who receives a notification, and who must be
/// told `.mightHaveMissed`. It does no I/O: the notifier's thread runs the commands it asks for
/// and reports them done.
///
/// A channel is listened to while at least one subscription holds it. A subscription is told
/// `.mightHaveMissed` once per session, as soon as all its channels are listened to: when it is
/// new, and again after the connection came back (what was sent in between is lost).
struct ListenStateMachine<Subscriber> {
    enum Command: Hashable, Sendable {
        case listen(String)
        case unlisten(String)
    }

    private struct Subscription {
        let channels: Set<String>
        let subscriber: Subscriber
        /// Told `.mightHaveMissed` in the current session.
        var told = false
    }

    private var subscriptions: [Int: Subscription] = [:]
    /// How many subscriptions hold each channel.
    private var holders: [String: Int] = [:]
    /// What the current session listens to.
    private(set) var listening: Set<String> = []
    private(set) var isConnected = false
    /// Nothing changed since `nextCommand()` last found the session in step.
    private var inStep = false
    /// Some subscription may be owed `.mightHaveMissed`.
    private var someUntold = false

    /// The channels some subscription holds.
    var wanted: Set<String> { Set(holders.keys) }

    mutating func subscribe(_ id: Int, to channels: Set<String>, _ subscriber: Subscriber) {
        if let old = subscriptions[id] { release(old.channels) }
        subscriptions[id] = Subscription(channels: channels, subscriber: subscriber)
        for channel in channels { holders[channel, default: 0] += 1 }
        inStep = false
        someUntold = true
    }

    /// Its subscriber, nil when `id` was not subscribed.
    @discardableResult
    mutating func unsubscribe(_ id: Int) -> Subscriber? {
        guard let removed = subscriptions.removeValue(forKey: id) else { return nil }
        release(removed.channels)
        inStep = false
        return removed.subscriber
    }

    /// Every subscriber, all unsubscribed (the notifier stopped).
    mutating func unsubscribeAll() -> [Subscriber] {
        defer { subscriptions = [:]; holders = [:] }
        return subscriptions.keys.sorted().compactMap { subscriptions[$0]?.subscriber }
    }

    private mutating func release(_ channels: Set<String>) {
        for channel in channels {
            holders[channel, default: 1] -= 1
            if holders[channel] == 0 { holders[channel] = nil }
        }
    }

    /// A new session, which listens to nothing; whatever was sent while there was none is lost:
    /// every subscription will be told again.
    mutating func connected() {
        isConnected = true
        forgetSession()
    }

    mutating func connectionLost() {
        isConnected = false
        forgetSession()
    }

    private mutating func forgetSession() {
        listening = []
        inStep = false
        someUntold = true
        for id in subscriptions.keys { subscriptions[id]?.told = false }
    }

    /// The next statement to bring the session in step with the subscriptions (LISTENs first, in
    /// name order), nil when it is (or there is no session). Cheap when nothing changed.
    mutating func nextCommand() -> Command? {
        guard isConnected, !inStep else { return nil }
        let wanted = wanted
        if let channel = wanted.subtracting(listening).min() { return .listen(channel) }
        if let channel = listening.subtracting(wanted).min() { return .unlisten(channel) }
        inStep = true
        return nil
    }

    /// `command` ran on the current session.
    mutating func succeeded(_ command: Command) {
        switch command {
        case .listen(let channel): listening.insert(channel)
        case .unlisten(let channel): listening.remove(channel)
        }
    }

    /// The subscribers to tell `.mightHaveMissed` now: not told in this session, and all their
    /// channels listened to. Each is returned once per session.
    mutating func takeUntold() -> [Subscriber] {
        guard isConnected, someUntold else { return [] }
        var untold: [Subscriber] = []
        someUntold = false
        for id in subscriptions.keys.sorted() {
            guard let subscription = subscriptions[id], !subscription.told else { continue }
            guard subscription.channels.isSubset(of: listening) else {
                someUntold = true
                continue
            }
            subscriptions[id]?.told = true
            untold.append(subscription.subscriber)
        }
        return untold
    }

    /// Who receives a notification on `channel`.
    func recipients(of channel: String) -> [Subscriber] {
        subscriptions.keys.sorted().compactMap { id in
            subscriptions[id].flatMap { $0.channels.contains(channel) ? $0.subscriber : nil }
        }
    }
}
