@testable import FleetQueue
import DrillKinds
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
        try await Task.sleep(for: .milliseconds(300))
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
