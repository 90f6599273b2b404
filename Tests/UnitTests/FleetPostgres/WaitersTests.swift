@testable import FleetPostgres
import FleetQueue
@testable import FleetTestSupport
import Foundation
import Renders
import Synchronization
import Testing

/// The waiter registry behind `FinishWatcher` and `RenderEvents`, without a database: the
/// notifier is never run, events are handed to `receive` as its subscription would.
@Suite struct WaitersTests {
    private let notifier = Notifier(conninfo: "host=unused", logger: testLogger)
    private static let ids = NotificationTopic<[Int64]>(
        "ids", encode: { $0.map(String.init).joined(separator: ",") },
        decode: { text in
            let ids = text.split(separator: ",").map { Int64($0) }
            return ids.contains(nil) ? nil : ids.compactMap { $0 }
        })

    private func waiters(remembering: Int = 0) -> Waiters<Int64> {
        Waiters(notifier: notifier, routes: [.init(Self.ids) { $0 }], rememberingUnawaited: remembering, logger: testLogger)
    }

    @Test func aNotificationWakesTheWaitersOfTheKeysItNames() async {
        let waiters = waiters()
        let one = waiters.wakeUps(for: 1)
        let three = waiters.wakeUps(for: 3)
        let other = waiters.wakeUps(for: 7)
        defer { [one, three, other].forEach { $0.stop() } }
        waiters.receive(.notification(channel: "ids", payload: "1,2,3"))
        var woken = one.events.makeAsyncIterator()
        #expect(await woken.next() != nil)
        woken = three.events.makeAsyncIterator()
        #expect(await woken.next() != nil)
        other.stop()
        var notWoken = other.events.makeAsyncIterator()
        #expect(await notWoken.next() == nil)
    }

    @Test func mightHaveMissedWakesEveryWaiter() async {
        let waiters = waiters()
        let wakeUps = [waiters.wakeUps(for: 1), waiters.wakeUps(for: 2)]
        defer { wakeUps.forEach { $0.stop() } }
        waiters.receive(.mightHaveMissed)
        for wakeUp in wakeUps {
            var events = wakeUp.events.makeAsyncIterator()
            #expect(await events.next() != nil)
        }
    }

    /// A payload its topic does not decode, or a channel with no route, wakes nobody (and is logged).
    @Test func anUnknownShapeIsIgnored() async {
        let waiters = waiters()
        let wait = Task { await waiters.wait(for: 1, timeout: .milliseconds(300)) }
        while waiters.wakeUpsWaiting(for: 1) == 0 { try? await Task.sleep(for: .milliseconds(5)) }
        waiters.receive(.notification(channel: "ids", payload: "1,x"))
        waiters.receive(.notification(channel: "elsewhere", payload: "1"))
        #expect(await wait.value == false)
    }

    @Test func aWaitReturnsWhenWokenOrAtItsTimeout() async {
        let waiters = waiters()
        let clock = ContinuousClock()
        let started = clock.now
        #expect(await waiters.wait(for: 1, timeout: .milliseconds(100)) == false)
        #expect(clock.now - started >= .milliseconds(100))

        let wait = Task { await waiters.wait(for: 2, timeout: .seconds(30)) }
        while waiters.wakeUpsWaiting(for: 2) == 0 { try? await Task.sleep(for: .milliseconds(5)) }
        waiters.wake([2])
        #expect(await wait.value == true)
        #expect(waiters.wakeUpsWaiting(for: 2) == 0)
    }

    /// Woken while nobody waited: remembered for the next waiter, when asked to.
    @Test func anUnawaitedWakeUpIsKeptForTheNextWaiterOnlyWhenRemembering() async {
        let remembering = waiters(remembering: 10)
        remembering.wake([5])
        #expect(await remembering.wait(for: 5, timeout: .seconds(30)) == true)
        #expect(await remembering.wait(for: 5, timeout: .milliseconds(50)) == false)

        let forgetting = waiters()
        forgetting.wake([5])
        #expect(await forgetting.wait(for: 5, timeout: .milliseconds(50)) == false)
    }

    /// The read loop: reads, waits for a wake-up, reads again until done or timed out.
    @Test func theReadLoopLooksAgainAtEachWakeUpUntilDone() async throws {
        let waiters = waiters()
        let reads = ReadCounter()
        let result = Task {
            try await waiters.wait(for: 9, timeout: .seconds(30), read: { reads.next() }, isDone: { $0 >= 3 })
        }
        for expected in 1...2 {
            while reads.count < expected || waiters.wakeUpsWaiting(for: 9) == 0 { try await Task.sleep(for: .milliseconds(5)) }
            waiters.receive(.notification(channel: "ids", payload: "9"))
        }
        let (value, timedOut) = try await result.value
        #expect(value == 3 && !timedOut)

        let (last, late) = try await waiters.wait(for: 10, timeout: .milliseconds(50), read: { 0 }, isDone: { $0 > 0 })
        #expect(last == 0 && late)
    }

    /// `FinishWatcher`'s routes: job ids from the queue's topic, a render id from the renders'.
    @Test func theQueueAndRenderTopicsRoundTrip() {
        #expect(QueueChannel.finished.decode(QueueChannel.finished.encode([1, 22, 333])) == [1, 22, 333])
        #expect(QueueChannel.finished.decode("1,,2") == nil)
        #expect(QueueChannel.finished.decode("") == nil)
        #expect(QueueChannel.jobs.decode(QueueChannel.jobs.encode(.renderRun)) == .renderRun)
        #expect(RenderChannel.finished.decode("r-1") == "r-1")
        #expect(QueueChannel.jobs.notifySQL(payload: "kind") == "pg_notify('fleet_jobs', kind)")
    }
}

private final class ReadCounter: Sendable {
    private let reads = Atomic<Int>(0)
    var count: Int { reads.load(ordering: .relaxed) }
    func next() -> Int { reads.add(1, ordering: .relaxed).newValue }
}
