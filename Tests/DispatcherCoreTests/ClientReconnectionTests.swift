import FleetAccess
@testable import DispatcherProtocol
import FleetPostgres
import FleetSupport
@testable import FleetTestSupport
import Foundation
import Synchronization
import Testing

/// The Swift client against the real `dispatcher` process killed with SIGKILL and started again
/// on the same port: requests safe to repeat go through, the others say they may have been
/// applied, none hangs and none is lost without a word.
@Suite struct ClientReconnectionTests {
    /// What happened to the requests of the stream.
    struct Tally: Sendable {
        var keyedJobs: [String: Int64] = [:]
        var unkeyedApplied = 0
        var unkeyedLost = 0
        var reads = 0
        var readsAfterRestart = 0
        var unexpected: [String] = []
    }

    final class StreamState: Sendable {
        let tally = Mutex(Tally())
        let restarted = Atomic<Bool>(false)
    }

    @Test func aStreamOfRequestsGoesOnAcrossAKilledAndRestartedDispatcher() async throws {
        let url = try await PostgresCluster.shared.makeDatabase()
        let dispatcher = try DispatcherProcess(databaseURL: url)
        try await dispatcher.start()
        let client = try await dispatcher.client(poolSize: 3)
        let stream = StreamState()
        // The stream runs until it has gone on after the restart, whatever the machine's speed.
        let goneOn: @Sendable () -> Bool = {
            stream.restarted.load(ordering: .relaxed) && stream.tally.withLock { $0.readsAfterRestart } >= 48
        }

        try await withDeadline(.seconds(90), "the stream across the restart") {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for loop in 0..<12 {
                    group.addTask {
                        var iteration = 0
                        while !goneOn() {
                            iteration += 1
                            let key = "stream-\(loop)-\(iteration)"
                            do {
                                let job = try await client.enqueue(kind: "drill.noop", options: JobOptions(idempotencyKey: key))
                                stream.tally.withLock { $0.keyedJobs[key] = job.jobId }
                                _ = try await client.status(jobId: job.jobId)
                                _ = try await client.ping()
                                let afterRestart = stream.restarted.load(ordering: .relaxed)
                                stream.tally.withLock { $0.reads += 2; if afterRestart { $0.readsAfterRestart += 2 } }
                            } catch {
                                stream.tally.withLock { $0.unexpected.append("\(key): \(error)") }
                            }
                            do {
                                _ = try await client.enqueue(kind: "drill.noop")
                                stream.tally.withLock { $0.unkeyedApplied += 1 }
                            } catch DispatcherClientError.connectionLost(op: "enqueue") {
                                stream.tally.withLock { $0.unkeyedLost += 1 }
                            } catch {
                                stream.tally.withLock { $0.unexpected.append("unkeyed \(key): \(error)") }
                            }
                        }
                    }
                }
                group.addTask {
                    // Killed mid-stream: once every loop had its chance to read.
                    try await waitFor("reads before the kill") { stream.tally.withLock { $0.reads } >= 48 }
                    await dispatcher.kill()
                    try await dispatcher.start()
                    stream.restarted.store(true, ordering: .relaxed)
                }
                try await group.waitForAll()
            }
        }

        let result = stream.tally.withLock { $0 }
        #expect(result.unexpected.isEmpty, "\(result.unexpected.prefix(5))")
        #expect(result.readsAfterRestart > 0, "the stream went on after the restart")
        // Every keyed enqueue that answered is a row; the unkeyed ones that answered are rows too,
        // and of those that said "may or may not", anywhere from none to all.
        let pool = PostgresPool(conninfo: url, maxConnections: 1)
        let rows = try await pool.query("SELECT count(*) AS n FROM jobs WHERE kind = 'drill.noop'").rows[0].int("n")
        let keyedRows = try await pool.query("SELECT count(*) AS n FROM jobs WHERE idempotency_key LIKE 'stream-%'").rows[0].int("n")
        #expect(keyedRows == result.keyedJobs.count)
        #expect(Set(result.keyedJobs.values).count == result.keyedJobs.count, "one job per key")
        let applied = result.keyedJobs.count + result.unkeyedApplied
        #expect((applied...applied + result.unkeyedLost).contains(rows), "\(rows) rows for \(result)")

        await client.close()
        await dispatcher.kill()
    }

    /// A stopped dispatcher holds the requests in flight; killed and restarted, the safe one is
    /// answered by the new process and the unsafe one fails with `connectionLost`.
    @Test func inFlightRequestsAreSentAgainOnlyWhenSafe() async throws {
        let url = try await PostgresCluster.shared.makeDatabase()
        let dispatcher = try DispatcherProcess(databaseURL: url)
        try await dispatcher.start()
        let client = try await dispatcher.client()
        let job = try await client.enqueue(kind: "drill.noop")
        dispatcher.signal(SIGSTOP)
        // Stopped before the frames go out: a thread still running could answer one of them.
        try await waitFor("the dispatcher stopped") { dispatcher.isStopped }
        let writtenBefore = client.requestsWritten
        let status = Task { try await client.status(jobId: job.jobId) }
        let cancel = Task { try await client.cancel(jobId: job.jobId) }
        let keyed = Task { try await client.enqueue(kind: "drill.noop", options: JobOptions(idempotencyKey: "held")) }
        // The three frames must be in the stopped process's socket before it dies: a request not
        // yet written then is safe to send again, cancel included, and would prove nothing.
        try await waitFor("the three held frames written") { client.requestsWritten >= writtenBefore + 3 }
        await dispatcher.kill()
        try await dispatcher.start()
        try await withDeadline(.seconds(30), "the held requests") {
            #expect(try await status.value.id == job.jobId)
            await #expect(throws: DispatcherClientError.connectionLost(op: "cancel")) { _ = try await cancel.value }
            let keyedJob = try await keyed.value
            #expect(try await client.enqueue(kind: "drill.noop", options: JobOptions(idempotencyKey: "held")).jobId == keyedJob.jobId)
        }
        await client.close()
        await dispatcher.kill()
    }

    /// `wait` is re-sent to the new process and returns when the job ends there.
    @Test func waitResumesOnTheRestartedDispatcher() async throws {
        let url = try await PostgresCluster.shared.makeDatabase()
        let dispatcher = try DispatcherProcess(databaseURL: url)
        try await dispatcher.start()
        let client = try await dispatcher.client()
        let job = try await client.enqueue(kind: "drill.noop")
        let writtenBefore = client.requestsWritten
        let waited = Task { try await client.wait(jobId: job.jobId, timeoutMs: 60_000) }
        try await waitFor("the wait's frame written") { client.requestsWritten > writtenBefore }
        await dispatcher.kill()
        try await dispatcher.start()
        // The cancel may reach the new process before or after the wait is sent again: either
        // way the wait ends with the job cancelled.
        let other = try await dispatcher.client()
        _ = try await other.cancel(jobId: job.jobId)
        try await withDeadline(.seconds(30), "the wait") {
            let result = try await waited.value
            #expect(!result.timedOut && result.job.state == .cancelled)
        }
        await other.close()
        await client.close()
        await dispatcher.kill()
    }

    @Test func anIdleCloseIsNotSeenByTheCaller() async throws {
        let url = try await PostgresCluster.shared.makeDatabase()
        // 2 s: a connection starved for a second on a loaded machine is not closed before its auth.
        let dispatcher = try DispatcherProcess(databaseURL: url, environment: ["FLEET_DISPATCHER_IDLE_TIMEOUT_SECONDS": "2"])
        try await dispatcher.start()
        let client = try await dispatcher.client()
        _ = try await client.ping()
        try await waitFor("the dispatcher's idle close") { client.connectionsUp == 0 }
        #expect(try await client.ping().pong)
        #expect(client.connectionsUp == 1)
        #expect(try await client.stats().windowSeconds == 3600, "authenticated again on the new connection")
        await client.close()
        await dispatcher.kill()
    }

    @Test func aDispatcherThatStaysDownFailsRequestsWithNotConnected() async throws {
        let url = try await PostgresCluster.shared.makeDatabase()
        let dispatcher = try DispatcherProcess(databaseURL: url)
        try await dispatcher.start()
        let client = try await dispatcher.client(reconnect: ReconnectPolicy(timeout: .milliseconds(1500)))
        await dispatcher.kill()
        let started = ContinuousClock.now
        try await withDeadline(.seconds(20), "NOT_CONNECTED") {
            do {
                _ = try await client.ping()
                Issue.record("answered by a dead dispatcher")
            } catch let error as DispatcherClientError {
                #expect(error.code == "NOT_CONNECTED", "\(error)")
            }
        }
        let waited = ContinuousClock.now - started
        // The whole timeout, counted from the request's first attempt: never less, even when a
        // backoff's draw would pass the deadline (the last attempt is made at it). A lower bound
        // only, which load cannot break; `withDeadline` guards against a hang.
        #expect(waited >= .milliseconds(1500), "\(waited)")
        await client.close()
    }

    @Test func withReconnectionOffAnEndedConnectionStaysEnded() async throws {
        let url = try await PostgresCluster.shared.makeDatabase()
        let dispatcher = try DispatcherProcess(databaseURL: url)
        try await dispatcher.start()
        let client = try await dispatcher.client(reconnect: .disabled)
        await dispatcher.kill()
        try await dispatcher.start()
        await #expect(throws: DispatcherClientError.connectionClosed) { _ = try await client.ping() }
        await client.close()
        await dispatcher.kill()
    }

    @Test func whichRequestsAreSafeToRepeat() {
        #expect(StatusRequest(jobId: 1).isSafeToRepeat && WaitRequest(jobId: 1, timeoutMs: nil).isSafeToRepeat)
        #expect(JobsListRequest().isSafeToRepeat && StatsRequest(windowSeconds: nil).isSafeToRepeat)
        #expect(!EnqueueRequest(kind: "drill.noop").isSafeToRepeat)
        #expect(EnqueueRequest(kind: "drill.noop", options: JobOptions(idempotencyKey: "k")).isSafeToRepeat)
        #expect(!CancelRequest(jobId: 1).isSafeToRepeat && !JobsRetryRequest(limit: 10).isSafeToRepeat)
        #expect(!AuthRequest(token: "t").isSafeToRepeat && !IssueTokenRequest().isSafeToRepeat)
    }
}
