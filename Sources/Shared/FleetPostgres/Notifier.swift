import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// What a subscription receives.
public enum NotifierEvent: Sendable, Equatable {
    /// Every channel of the subscription is listened to from now on, and anything sent before may
    /// have been missed: the subscription is new, or the LISTEN connection came back after it was
    /// lost (a server restart). Look for work.
    case mightHaveMissed
    case notification(channel: String, payload: String)
}

/// One subscriber's stream of events. `unsubscribe()`, or cancelling the task that iterates
/// `events`, ends it; the notifier UNLISTENs a channel once no subscription holds it.
public struct NotifierSubscription: Sendable {
    public let events: AsyncStream<NotifierEvent>
    fileprivate let continuation: AsyncStream<NotifierEvent>.Continuation

    public func unsubscribe() { continuation.finish() }
}

/// A statement the notifier runs on every new session of its LISTEN connection, right after it
/// connects and before its LISTENs: for what must live exactly as long as that session (a worker
/// takes a session-level advisory lock there, which the server releases the moment the session
/// ends). The notifier knows nothing of what it does. It succeeded when it returned a row; when
/// it returned none or failed with the link still up, it is run again every `retry` on the same
/// session.
public struct SessionStatement: Sendable, Equatable {
    /// Names it in the log; one name, one statement.
    public let name: String
    public let sql: String
    /// In PostgreSQL's text format.
    public let parameters: [String?]
    /// How long after a try that did not succeed it is tried again.
    public let retry: Duration
    /// No row is an ordinary answer (another session holds what it takes), not logged; false:
    /// it is logged as a warning.
    public let contended: Bool

    public init(name: String, sql: String, parameters: [String?], retry: Duration = .seconds(5), contended: Bool = false) {
        self.name = name
        self.sql = sql
        self.parameters = parameters
        self.retry = retry
        self.contended = contended
    }
}

/// Thrown to a caller waiting on a notifier that stopped.
public struct NotifierStopped: Error, Sendable {}

/// The process's one LISTEN connection, shared by every subscriber (River's notifier): each
/// subscribes to the channels it cares about, the connection LISTENs to a channel while at least
/// one subscription holds it and UNLISTENs it after the last one goes. A dedicated thread owns
/// the connection, waiting on its socket; it reconnects by itself, and since notifications sent
/// while it was away are lost, every subscription then gets `.mightHaveMissed`. Notifications
/// are hints: subscribers always keep a poll as the guarantee.
///
/// Create one per process, pass it to the subscribers and run it as a service (first in the
/// group, so it stops after them). Subscriptions made before it runs start with it.
///
/// Without a connection (`pollOnly(every:)`) it stands in for one: no notification arrives, and
/// every subscription is told `.mightHaveMissed` when it starts and again every interval, so its
/// subscribers look for what they wait on at that pace.
public final class Notifier: Service, Sendable {
    private enum Source: Sendable {
        case connection(conninfo: String, applicationName: String)
        case polling(interval: Duration)
    }

    private let source: Source
    private let logger: Logger
    private let state = Mutex(State())
    /// Wakes the thread from its wait on the socket when the subscriptions change or it must stop.
    private let wakeUp = WakePipe()

    private typealias Subscriber = AsyncStream<NotifierEvent>.Continuation

    private struct State {
        /// The subscriptions and what the session listens to; the thread runs what it asks for.
        var listens = ListenStateMachine<Subscriber>()
        var nextID = 0
        var stopped = false
        /// Callers of `listeningChannels()` waiting for the thread's answer.
        var probes: [CheckedContinuation<[String], any Error>] = []
        /// Run on every session, in the order they were set.
        var sessionStatements: [SessionStatement] = []
        /// The names of those that succeeded on the current session.
        var succeededOnSession: Set<String> = []
    }

    /// The subscribers' events buffered while they are busy; past it the oldest are dropped
    /// (hints, with the pollers as the guarantee).
    private static let bufferedEvents = 10_000

    /// LISTENs on a connection to `conninfo`, which must be a session: PostgreSQL itself, or a
    /// pooler in session mode (a transaction pooler would hand LISTEN to a server connection
    /// other clients then use). Each reconnect resolves `conninfo` again.
    public init(conninfo: String, applicationName: String = "wearbloom-listener", logger: Logger) {
        self.source = .connection(conninfo: conninfo, applicationName: applicationName)
        self.logger = logger
    }

    private init(pollingEvery interval: Duration, logger: Logger) {
        self.source = .polling(interval: interval)
        self.logger = logger
    }

    /// A notifier with no connection: its subscriptions are told `.mightHaveMissed` every
    /// `interval`, and no session statement runs (there is no session to hold it).
    public static func pollOnly(every interval: Duration, logger: Logger) -> Notifier {
        Notifier(pollingEvery: interval, logger: logger)
    }

    /// Runs `statement` on every session, the current one included, until it succeeds there
    /// (set it before `run` to run it before the first session's LISTENs); it replaces one of the
    /// same name. A poll-only notifier never runs it.
    public func runOnEachSession(_ statement: SessionStatement) {
        state.withLock { state in
            state.sessionStatements.removeAll { $0.name == statement.name }
            state.sessionStatements.append(statement)
        }
        wakeUp.poke()
    }

    /// Whether `statement` succeeded on the current session: what it took is held for as long as
    /// that session lives. False between sessions, and always for a poll-only notifier.
    public func sessionHolds(_ statement: SessionStatement) -> Bool {
        state.withLock { $0.succeededOnSession.contains(statement.name) }
    }

    /// Without a connection: no session, no session statement.
    public var isPollOnly: Bool {
        if case .polling = source { return true }
        return false
    }

    /// Subscribes to `topics`; the first event is `.mightHaveMissed` once they are all listened to.
    public func subscribe(to topics: [any NotificationChannel]) -> NotifierSubscription {
        subscribe(to: topics.map(\.name))
    }

    /// Subscribes to `channels`; the first event is `.mightHaveMissed` once they are all listened to.
    public func subscribe(to channels: [String]) -> NotifierSubscription {
        let (events, continuation) = AsyncStream.makeStream(of: NotifierEvent.self, bufferingPolicy: .bufferingNewest(Self.bufferedEvents))
        let id: Int? = state.withLock { state in
            guard !state.stopped else { return nil }
            state.nextID += 1
            state.listens.subscribe(state.nextID, to: Set(channels), continuation)
            return state.nextID
        }
        guard let id else {
            continuation.finish()
            return NotifierSubscription(events: events, continuation: continuation)
        }
        continuation.onTermination = { [weak self] _ in self?.remove(id) }
        wakeUp.poke()
        return NotifierSubscription(events: events, continuation: continuation)
    }

    private func remove(_ id: Int) {
        guard state.withLock({ $0.listens.unsubscribe(id) }) != nil else { return }
        wakeUp.poke()
    }

    /// Listens until a graceful shutdown or cancellation, then closes the connection and ends
    /// every subscription's events. Runs once.
    public func run() async {
        await withGracefulShutdownHandler {
            await withTaskCancellationHandler {
                await withCheckedContinuation { (finished: CheckedContinuation<Void, Never>) in
                    let thread = Thread { [self] in
                        switch source {
                        case .connection(let conninfo, let applicationName):
                            listenUntilStopped(conninfo: conninfo, applicationName: applicationName)
                        case .polling(let interval):
                            pollUntilStopped(every: interval)
                        }
                        finished.resume()
                    }
                    thread.name = "postgres-notifier"
                    thread.start()
                }
            } onCancel: {
                self.stop()
            }
        } onGracefulShutdown: {
            self.stop()
        }
    }

    private func stop() {
        let probes = state.withLock { state in
            state.stopped = true
            defer { state.probes = [] }
            return state.probes
        }
        for probe in probes { probe.resume(throwing: NotifierStopped()) }
        wakeUp.poke()
    }

    private var isStopped: Bool { state.withLock { $0.stopped } }

    /// The channels the LISTEN connection's session listens to, as the server reports them
    /// (`pg_listening_channels()`), once it has caught up with the subscriptions made before the
    /// call. Waits for the connection when it is down. None for a poll-only notifier.
    package func listeningChannels() async throws -> [String] {
        try await withCheckedThrowingContinuation { probe in
            let queued = state.withLock { state in
                guard !state.stopped else { return false }
                state.probes.append(probe)
                return true
            }
            guard queued else { return probe.resume(throwing: NotifierStopped()) }
            wakeUp.poke()
        }
    }

    // MARK: The thread

    private func listenUntilStopped(conninfo: String, applicationName: String) {
        var backoff = Duration.milliseconds(50)
        while !isStopped {
            let connection: ListenConnection
            do {
                connection = try ListenConnection(conninfo: conninfo, applicationName: applicationName)
            } catch {
                logger.debug("LISTEN connection failed", metadata: ["error": "\(error)"])
                wakeUp.wait(for: backoff)
                backoff = min(backoff * 2, .seconds(2))
                continue
            }
            backoff = .milliseconds(50)
            state.withLock { $0.listens.connected() }
            serve(connection)
            state.withLock { state in
                state.listens.connectionLost()
                state.succeededOnSession = []
            }
            if !isStopped { logger.warning("LISTEN connection lost; reconnecting") }
        }
        for subscriber in state.withLock({ $0.listens.unsubscribeAll() }) { subscriber.finish() }
    }

    /// Without a connection: each round stands for a new session in which every subscription's
    /// channels are listened to at once, so each subscription is told `.mightHaveMissed` once a
    /// round (and a new one at once).
    private func pollUntilStopped(every interval: Duration) {
        var roundStarted = ContinuousClock.now
        state.withLock { $0.listens.connected() }
        while !isStopped {
            let (untold, probes) = state.withLock { state in
                while let command = state.listens.nextCommand() { state.listens.succeeded(command) }
                defer { state.probes = [] }
                return (state.listens.takeUntold(), state.probes)
            }
            for subscriber in untold { subscriber.yield(.mightHaveMissed) }
            for probe in probes { probe.resume(returning: []) }
            let elapsed = ContinuousClock.now - roundStarted
            if elapsed < interval { wakeUp.wait(for: interval - elapsed) }
            if ContinuousClock.now - roundStarted >= interval {
                roundStarted = .now
                state.withLock { $0.listens.connected() }
            }
        }
        for subscriber in state.withLock({ $0.listens.unsubscribeAll() }) { subscriber.finish() }
    }

    /// Keeps `connection`'s LISTENs in step with the subscriptions and hands out what arrives,
    /// until the link fails or the notifier stops.
    private func serve(_ connection: ListenConnection) {
        var lastHeard = ContinuousClock.now
        var lastTries: [String: ContinuousClock.Instant] = [:]
        while !isStopped {
            // Before the LISTENs: a subscriber told `.mightHaveMissed` finds them done.
            guard runSessionStatements(on: connection, lastTries: &lastTries) else { return }
            guard reconcile(connection) else { return }
            guard answerProbes(connection) else { return }
            // Statements run above may have read notifications into libpq's queue.
            deliverQueued(connection)
            guard connection.socket >= 0 else { return }
            switch wakeUp.wait(for: .seconds(1), orReadable: connection.socket) {
            case .failed:
                return
            case .readable:
                lastHeard = .now
                guard connection.consumeInput() else { return }
                deliverQueued(connection)
            case .woken:
                break
            case .timedOut:
                // A silent link (no FIN, no RST) is only found by talking: check it every few seconds.
                if ContinuousClock.now - lastHeard > .seconds(5) {
                    guard connection.isHealthy() else { return }
                    lastHeard = .now
                }
            }
        }
    }

    /// Runs the session statements that have not succeeded on this session, each no sooner than
    /// its `retry` after its last try; false when the link failed.
    private func runSessionStatements(on connection: ListenConnection, lastTries: inout [String: ContinuousClock.Instant]) -> Bool {
        let pending = state.withLock { state in state.sessionStatements.filter { !state.succeededOnSession.contains($0.name) } }
        for statement in pending {
            if let last = lastTries[statement.name], ContinuousClock.now - last < statement.retry { continue }
            lastTries[statement.name] = .now
            switch run(statement, on: connection) {
            case .succeeded: state.withLock { _ = $0.succeededOnSession.insert(statement.name) }
            case .notYet: break
            case .linkFailed: return false
            }
        }
        return true
    }

    private enum StatementOutcome { case succeeded, notYet, linkFailed }

    private func run(_ statement: SessionStatement, on connection: ListenConnection) -> StatementOutcome {
        if let rows = connection.rows(statement.sql, statement.parameters) {
            if rows > 0 { return .succeeded }
            if !statement.contended {
                logger.warning("session statement returned no row; trying again", metadata: [
                    "statement": "\(statement.name)", "retry": "\(statement.retry)",
                ])
            }
            return .notYet
        }
        let error = connection.lastError
        guard connection.isHealthy() else { return .linkFailed }
        logger.warning("session statement failed; trying again", metadata: [
            "statement": "\(statement.name)", "error": "\(error)", "retry": "\(statement.retry)",
        ])
        return .notYet
    }

    /// Runs the LISTENs and UNLISTENs the subscriptions call for, then tells the subscriptions
    /// whose channels are all listened to now that they may have missed some. False when the
    /// link failed.
    private func reconcile(_ connection: ListenConnection) -> Bool {
        while let command = state.withLock({ $0.listens.nextCommand() }) {
            let ran = switch command {
            case .listen(let channel): connection.execute("LISTEN", channel)
            case .unlisten(let channel): connection.execute("UNLISTEN", channel)
            }
            guard ran else { return false }
            state.withLock { $0.listens.succeeded(command) }
        }
        for subscriber in state.withLock({ $0.listens.takeUntold() }) { subscriber.yield(.mightHaveMissed) }
        return true
    }

    private func deliverQueued(_ connection: ListenConnection) {
        while let (channel, payload) = connection.nextNotification() {
            let recipients = state.withLock { $0.listens.recipients(of: channel) }
            for recipient in recipients { recipient.yield(.notification(channel: channel, payload: payload)) }
        }
    }

    /// Answers the callers of `listeningChannels()`; false (their questions kept) when the link failed.
    private func answerProbes(_ connection: ListenConnection) -> Bool {
        let probes = state.withLock { state in
            defer { state.probes = [] }
            return state.probes
        }
        guard !probes.isEmpty else { return true }
        guard let channels = connection.listeningChannels() else {
            // Asked again on the next connection, unless the notifier stopped meanwhile.
            let unanswerable = state.withLock { state in
                if state.stopped { return probes }
                state.probes += probes
                return []
            }
            for probe in unanswerable { probe.resume(throwing: NotifierStopped()) }
            return false
        }
        for probe in probes { probe.resume(returning: channels) }
        return true
    }
}
