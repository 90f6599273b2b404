@testable import FleetQueue
import DrillKinds
import FleetPostgres
@testable import FleetTestSupport
import Foundation
import Logging
import Testing

/// How idle workers find new work: NOTIFY at once, the poll when no notification comes.
@Suite struct WorkerWakeTests {
    @Test func aNotificationWakesAnIdleWorkerLongBeforeItsPoll() async throws {
        let q = try await TestQueue.make()
        let worker = RunningWorker(q, handlers: [NoopHandler()], concurrency: [.drillNoop: 4], pollInterval: .seconds(3600))
        try await q.waitUntil("worker registered") { try await q.pool.query("SELECT 1 FROM workers").rows.count == 1 }
        // Listening, so the job below is found by its notification (a job enqueued before the
        // LISTEN would be found by the look a new LISTEN connection makes).
        try await q.waitUntil("the worker's LISTEN") { try await !worker.notifier.listeningChannels().isEmpty }
        let job = try await q.queue.enqueue(NewJob(kind: .drillNoop))
        try await q.waitUntil(timeout: .seconds(10), "completed by notification") { try await q.queue.job(id: job.id)?.state == .completed }
        try await worker.stop()
    }

    @Test func thePollFindsJobsThatCameWithoutANotification() async throws {
        let q = try await TestQueue.make()
        let worker = RunningWorker(q, handlers: [NoopHandler()], concurrency: [.drillNoop: 4], pollInterval: .milliseconds(300))
        try await q.waitUntil("worker registered") { try await q.pool.query("SELECT 1 FROM workers").rows.count == 1 }
        // Straight into the table, as a backend might: no NOTIFY.
        try await q.pool.query("INSERT INTO jobs (kind) SELECT 'drill.noop' FROM generate_series(1, 5)")
        try await q.waitUntil(timeout: .seconds(10), "completed by polling") { try await q.states() == [.completed: 5] }
        try await worker.stop()
    }

    /// A `wait` marks its job while a claim looks: the claim passes over the locked row and
    /// finds nothing, and the mark's commit tells the kind's workers again.
    @Test func aClaimThatPassedOverAJobAWaitWasMarkingClaimsItAfterTheMark() async throws {
        try await passedOver { job, connection in
            try await PostgresQueueDriver(executor: connection).jobWatchFinish(id: job)
        }
    }

    /// The same for a job enqueued to run after it: its transaction locks the dependency.
    @Test func aClaimThatPassedOverADependencyBeingLockedClaimsItAfterTheEnqueue() async throws {
        try await passedOver { job, connection in
            var dependent = try NewJob(kind: .drillScript, encoding: DrillScript(sleepMs: 0))
            dependent.after = [job]
            _ = try await JobQueue.enqueue([dependent], in: connection)
        }
    }

    /// An available job, `lock`ed in an open transaction (by the statement under test) while an
    /// idle worker that polls once an hour is woken and claims; then the transaction commits.
    /// Only what the commit announces can then bring the worker back for it.
    private func passedOver(lock: (Int64, PostgresConnection) async throws -> Void) async throws {
        let q = try await TestQueue.make()
        let said = LogRecord()
        let notifier = Notifier(conninfo: q.url, logger: said.logger)
        let worker = WorkerRuntime(
            executable: "test-worker", configuration: WorkerConfiguration(concurrency: [.drillNoop: 1], pollInterval: .seconds(3600)),
            driver: q.driver, notifier: notifier, handlers: [NoopHandler()], logger: said.logger)
        let running = RunningService(notifier, worker)
        try await q.waitUntil("the worker's first look") { said.last(100).contains("claimed count=0") }
        // Straight into the table: no notification yet.
        let job = try await q.pool.query("INSERT INTO jobs (kind) VALUES ('drill.noop') RETURNING id").rows[0].int64("id")
        let connection = try await PostgresConnection.connect(q.url)
        try await connection.query("BEGIN")
        try await lock(job, connection)
        let claimsBefore = said.count("claimed count=0")
        try await q.pool.notify(QueueChannel.jobs, .drillNoop)
        try await q.waitUntil(timeout: .seconds(30), "a claim that passed over the locked job") { said.count("claimed count=0") > claimsBefore }
        #expect(try await q.queue.job(id: job)?.state == .available)
        try await connection.query("COMMIT")
        try await q.waitUntil(timeout: .seconds(30), "the job claimed after the commit; the worker said:\n\(said.last(20))") {
            try await q.queue.job(id: job)?.state == .completed
        }
        try await running.stop()
    }
}
