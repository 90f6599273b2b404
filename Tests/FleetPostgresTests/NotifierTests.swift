@testable import DispatcherCore
import DrillKinds
import FleetPostgres
@testable import FleetQueue
@testable import FleetTestSupport
import Foundation
import Renders
import Testing

/// The process's one LISTEN connection: subscribers share it, channels are listened to while
/// someone holds them, and a reconnection tells every subscriber it may have missed some.
@Suite struct NotifierTests {
    @Test func twoSubscribersOfOneChannelBothReceive() async throws {
        let q = try await TestQueue.make()
        let listening = TestNotifier(url: q.url)
        defer { listening.stop() }
        var first = listening.events(["shared"])
        var second = listening.events(["shared"])
        var other = listening.events(["other"])
        for events in [first, second, other] {
            var events = events
            #expect(await events.next() == .mightHaveMissed)
        }
        try await q.pool.query("SELECT pg_notify('shared', 'hello')")
        try await q.pool.query("SELECT pg_notify('other', 'only for the other')")
        #expect(await first.next() == .notification(channel: "shared", payload: "hello"))
        #expect(await second.next() == .notification(channel: "shared", payload: "hello"))
        #expect(await other.next() == .notification(channel: "other", payload: "only for the other"))
    }

    @Test func unsubscribingTheLastHolderOfAChannelUnlistensIt() async throws {
        let q = try await TestQueue.make()
        let listening = TestNotifier(url: q.url)
        defer { listening.stop() }
        let one = listening.notifier.subscribe(to: ["a"])
        let both = listening.notifier.subscribe(to: ["a", "b"])
        var oneEvents = one.events.makeAsyncIterator()
        var bothEvents = both.events.makeAsyncIterator()
        #expect(await oneEvents.next() == .mightHaveMissed)
        #expect(await bothEvents.next() == .mightHaveMissed)
        #expect(try await listening.notifier.listeningChannels() == ["a", "b"])

        both.unsubscribe()
        #expect(await bothEvents.next() == nil)
        // "a" is still held by the other subscription.
        #expect(try await listening.notifier.listeningChannels() == ["a"])
        try await q.pool.query("SELECT pg_notify('a', 'still heard')")
        #expect(await oneEvents.next() == .notification(channel: "a", payload: "still heard"))

        one.unsubscribe()
        #expect(try await listening.notifier.listeningChannels() == [])
    }

    /// After a server restart every subscription is told it may have missed notifications, and
    /// each of its channels is listened to again.
    @Test func aRestartSignalsEverySubscriberAndDeliveryResumes() async throws {
        try await PostgresCluster.withPrivate { cluster in
            let url = try await cluster.makeEmptyDatabase()
            let pool = PostgresPool(conninfo: url, maxConnections: 1)
            let listening = TestNotifier(url: url)
            defer { listening.stop() }
            var first = listening.events(["first"])
            var second = listening.events(["second"])
            #expect(await first.next() == .mightHaveMissed)
            #expect(await second.next() == .mightHaveMissed)

            try await cluster.restart()

            #expect(await first.next() == .mightHaveMissed)
            #expect(await second.next() == .mightHaveMissed)
            try await pool.withRetry { try await $0.query("SELECT pg_notify('first', '1'), pg_notify('second', '2')") }
            #expect(await first.next() == .notification(channel: "first", payload: "1"))
            #expect(await second.next() == .notification(channel: "second", payload: "2"))
            #expect(try await listening.notifier.listeningChannels() == ["first", "second"])
        }
    }

    /// A worker and the dispatcher's finish watcher in one process share one LISTEN connection,
    /// and both hear through it.
    @Test func aProcessHoldsOneListeningConnectionForAllItsSubscribers() async throws {
        let q = try await TestQueue.make()
        let applicationName = "notifier-test-\(UUID().uuidString.prefix(8))"
        // What the worker and the notifier said, shown if the test fails.
        let said = LogRecord()
        let notifier = Notifier(conninfo: q.url, applicationName: applicationName, logger: said.logger)
        let worker = WorkerRuntime(
            executable: "test-worker",
            // No poll to speak of: only a notification can wake it for a job enqueued later.
            configuration: WorkerConfiguration(concurrency: [.drillScript: 1], pollInterval: .seconds(3600)),
            driver: q.driver, notifier: notifier, handlers: [ScriptHandler()], logger: said.logger)
        let watcher = FinishWatcher(notifier: notifier)
        let running = RunningService(notifier, worker, watcher)

        let everyChannel = [QueueChannel.control.name, QueueChannel.jobs.name, QueueChannel.finished.name, RenderChannel.finished.name].sorted()
        try await q.waitUntil(timeout: .seconds(20), "both subscribed") {
            try await notifier.listeningChannels() == everyChannel
        }
        let connections = try await q.pool.query(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1", [applicationName])
        #expect(try connections.rows[0].int("n") == 1)

        // Runs long enough for the watch to start before it ends.
        let job = try await q.queue.enqueue(NewJob(kind: .drillScript, encoding: DrillScript(sleepMs: 2000)))
        try await q.queue.watchFinish(id: job.id)
        let wakeUps = watcher.waiters.wakeUps(for: .job(job.id))
        // Generous: the whole suite starts at once on two cores, and only a lost notification
        // (never a slow machine) may fail this test.
        let giveUp = Task { try? await Task.sleep(for: .seconds(90)); wakeUps.stop() }
        defer { giveUp.cancel(); wakeUps.stop() }
        var woken = wakeUps.events.makeAsyncIterator()
        // The worker ran it (woken by `fleet_jobs`), and its end woke the watcher (`fleet_jobs_finished`).
        let wokenAtAll = await woken.next() != nil
        let record = try await q.queue.job(id: job.id)
        #expect(wokenAtAll, "the watcher was not woken; the job: \(String(describing: record)); the worker and notifier said:\n\(said.last(60))")
        #expect(record?.state == .completed)
        try await running.stop()
    }
}
