@testable import FleetQueue
import DrillKinds
import FleetPostgres
import FleetSupport
@testable import FleetTestSupport
import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import Testing

/// Counts how many of its jobs run at once.
final class GaugeHandler: JobHandler {
    let kind = JobKind.drillNoop
    private let gauge = Mutex((now: 0, peak: 0, done: 0))

    var peak: Int { gauge.withLock { $0.peak } }
    var done: Int { gauge.withLock { $0.done } }

    func run(_ job: ClaimedJob, context: JobContext) async throws -> JSONValue? {
        gauge.withLock { $0.now += 1; $0.peak = max($0.peak, $0.now) }
        try await Task.sleep(for: .milliseconds(50))
        gauge.withLock { $0.now -= 1; $0.done += 1 }
        return nil
    }
}

@Suite struct WorkerRuntimeTests {
    func script(_ script: DrillScript, maxAttempts: Int = 5) throws -> NewJob {
        try NewJob(kind: .drillScript, encoding: script, maxAttempts: maxAttempts)
    }

    @Test func concurrencyPerKindIsNeverExceeded() async throws {
        let q = try await TestQueue.make()
        let gauge = GaugeHandler()
        let worker = RunningWorker(q, handlers: [gauge], concurrency: [.drillNoop: 3])
        _ = try await q.queue.enqueue((0..<30).map { _ in NewJob(kind: .drillNoop) })
        try await q.waitUntil("all done") { try await q.states()[.completed] == 30 }
        try await worker.stop()
        #expect(gauge.peak == 3)
        #expect(gauge.done == 30)
    }

    @Test func failuresRetryThenCompleteOrEndDead() async throws {
        let q = try await TestQueue.make()
        let worker = RunningWorker(q, handlers: [ScriptHandler()], concurrency: [.drillScript: 4])
        let flaky = try await q.queue.enqueue(script(.init(failAttempts: 2)))
        let hopeless = try await q.queue.enqueue(script(.init(failAttempts: 10), maxAttempts: 3))
        let permanent = try await q.queue.enqueue(script(.init(permanent: true)))
        let malformed = try await q.queue.enqueue(NewJob(kind: .drillScript, payload: #"{"sleepMs": "soon"}"#))
        try await q.waitUntil("all ended") { try await q.states().keys.allSatisfy(\.isTerminal) }
        try await worker.stop()

        let flakyRecord = try #require(try await q.queue.job(id: flaky.id))
        #expect(flakyRecord.state == .completed && flakyRecord.attempt == 3 && flakyRecord.errors.count == 2)
        let hopelessRecord = try #require(try await q.queue.job(id: hopeless.id))
        #expect(hopelessRecord.state == .dead && hopelessRecord.attempt == 3)
        #expect(hopelessRecord.errors.map(\.error) == (1...3).map { "scripted failure on attempt \($0)" })
        let permanentRecord = try #require(try await q.queue.job(id: permanent.id))
        #expect(permanentRecord.state == .dead && permanentRecord.attempt == 1)
        #expect(permanentRecord.errors.first?.code == "DRILL_PERMANENT")
        let malformedRecord = try #require(try await q.queue.job(id: malformed.id))
        #expect(malformedRecord.state == .dead && malformedRecord.attempt == 1)
        #expect(malformedRecord.errors.first?.code == "MALFORMED_PAYLOAD")
        #expect(malformedRecord.errors.first?.error.contains("sleepMs") == true)
    }

    @Test func cancellingARunningJobStopsItsHandler() async throws {
        let q = try await TestQueue.make()
        let worker = RunningWorker(q, handlers: [ScriptHandler()], concurrency: [.drillScript: 2])
        // An hour's sleep: only a stopped handler lets the job reach `cancelled` within the wait.
        let job = try await q.queue.enqueue(script(.init(sleepMs: 3_600_000)))
        try await q.waitUntil("running") { try await q.states()[.running] == 1 }
        #expect(try await q.queue.cancel(id: job.id) == .requested(owner: worker.runtime.id))
        try await q.waitUntil("cancelled") { try await q.queue.job(id: job.id)?.state == .cancelled }
        try await worker.stop()
    }

    @Test func gracefulShutdownFinishesShortJobsAndHandsBackTheRest() async throws {
        let q = try await TestQueue.make()
        let worker = RunningWorker(q, handlers: [ScriptHandler()], concurrency: [.drillScript: 10], grace: .seconds(6))
        let long = try await q.queue.enqueue((0..<3).map { _ in try script(.init(sleepMs: 60_000)) })
        // Ignores cancellation and runs for 30 s (blocking its thread, so no longer): the stop must
        // not wait for it.
        let stubborn = try await q.queue.enqueue(script(.init(sleepMs: 30_000, ignoreCancel: true)))
        try await q.waitUntil("the long jobs running") { try await q.states()[.running] == 4 }
        let stubbornStillSleeps = ContinuousClock.now + .seconds(30)
        // Enqueued last and given 3 s, well inside the grace: on a loaded machine a 200 ms job
        // claimed with the others had ended before the last long one was claimed (CI, stop 21).
        let short = try await q.queue.enqueue((0..<4).map { _ in try script(.init(sleepMs: 3_000)) })
        try await q.waitUntil("all running") { try await q.states()[.running] == 8 }
        try await worker.stop()
        // Not a bound on the machine's speed: the stubborn job's own end, which the stop returned before.
        #expect(ContinuousClock.now < stubbornStillSleeps, "the stop waited for a handler that ignores cancellation")
        for job in short { #expect(try await q.queue.job(id: job.id)?.state == .completed) }
        for job in long + [stubborn] {
            let record = try #require(try await q.queue.job(id: job.id))
            #expect(record.state == .available && record.attempt == 0 && record.leaseOwner == nil, "\(record)")
        }
    }
}
