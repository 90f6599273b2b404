@testable import FleetQueue
import DrillKinds
import FleetPostgres
@testable import FleetRuntime
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

@Suite struct JSONLogHandlerTests {
    @Test func linesAreOneJSONObjectWithMetadataAtTheTopLevel() throws {
        var handler = JSONLogHandler(label: "render-worker", level: .info)
        handler[metadataKey: "worker_id"] = "w1"
        let event = LogEvent(level: .warning, message: "job \"7\" failed\nretrying", metadata: ["job_id": "7", "worker_id": "w2"],
                             source: nil, file: #fileID, function: #function, line: #line)
        let line = handler.line(for: event, at: "2026-11-22T00:00:00.000Z")
        #expect(line.hasSuffix("}\n") && line.filter { $0 == "\n" }.count == 1)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String])
        #expect(object == [
            "ts": "2026-11-22T00:00:00.000Z", "level": "warning", "msg": "job \"7\" failed\nretrying",
            "logger": "render-worker", "job_id": "7", "worker_id": "w2",
        ])
    }

    @Test func controlCharactersAreEscapedAndReadBack() throws {
        let handler = JSONLogHandler(label: "dispatcher", level: .info)
        let message = "tab\there, bell\u{7}, nul\u{0}, return\r, back\\slash, é"
        let event = LogEvent(level: .info, message: "\(message)", metadata: [:], source: nil, file: #fileID, function: #function, line: #line)
        let line = handler.line(for: event, at: "t")
        #expect(line.contains(#""msg":"tab\there, bell\u0007, nul\u0000, return\r, back\\slash, é""#))
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String])
        #expect(object["msg"] == message)
    }

    /// Inside a span, the provider (tracing's) adds the span's ids; the handler's and the event's
    /// own metadata win over it.
    @Test func aMetadataProvidersFieldsComeUnderTheHandlersAndTheEvents() throws {
        var handler = JSONLogHandler(label: "dispatcher", level: .info, metadataProvider: .init {
            ["trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7", "kind": "provided"]
        })
        handler[metadataKey: "kind"] = "handler"
        let event = LogEvent(level: .info, message: "enqueued", metadata: ["job_id": "7"], source: nil, file: #fileID, function: #function, line: #line)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(handler.line(for: event, at: "t").utf8)) as? [String: String])
        #expect(object["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736" && object["span_id"] == "00f067aa0ba902b7")
        #expect(object["kind"] == "handler" && object["job_id"] == "7")
    }
}
