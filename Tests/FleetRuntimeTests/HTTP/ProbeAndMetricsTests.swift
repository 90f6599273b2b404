@testable import DispatcherCore
import DrillKinds
import FleetHTTP
import FleetPostgres
@testable import FleetQueue
@testable import FleetTestSupport
import Foundation
import Testing

/// `/healthz`, `/readyz` and `/metrics` over real HTTP: the dispatcher's listener in this
/// process, and a worker executable started as its own process.
/// Serialized: two of its tests run `QueueGauges`, whose gauges are the process's, each on its
/// own database; side by side, one's refresh overwrote the other's figures.
@Suite(.serialized) struct ProbeAndMetricsTests {
    @Test func probesAnswerWhileTheDatabaseIsUp() async throws {
        let q = try await TestQueue.make()
        try await DispatcherHTTPHarness.with(databaseURL: q.url) { http in
            let health = try await http.get("/healthz")
            #expect(health.status == 200)
            let ready = try await http.get("/readyz")
            #expect(ready.status == 200, "\(ready.text)")
            #expect(ready.field("ready") as? Bool == true)
            #expect(try await http.get("/nothing-here").status == 404)
        }
    }

    @Test func readyzIs503WhenTheDatabaseDoesNotAnswer() async throws {
        let nowhere = "postgresql://postgres@127.0.0.1:\(try freePort())/fleet?connect_timeout=2"
        try await DispatcherHTTPHarness.with(databaseURL: nowhere) { http in
            #expect(try await http.get("/healthz").status == 200)
            let ready = try await http.get("/readyz")
            #expect(ready.status == 503)
            #expect((ready.field("reason") as? String)?.hasPrefix("database") == true, "\(ready.text)")
        }
    }

    @Test func readyzIs503AsSoonAsTheDrainStartsWhileHealthzStaysUp() async throws {
        let q = try await TestQueue.make()
        let hold = DrainHold()
        try await DispatcherHTTPHarness.with(databaseURL: q.url, services: [hold]) { http in
            #expect(try await http.get("/readyz").status == 200)
            let stopping = Task { await http.group.triggerGracefulShutdown() }
            let deadline = ContinuousClock.now + .seconds(5)
            var ready = try await http.get("/readyz")
            while ready.status == 200, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
                ready = try await http.get("/readyz")
            }
            #expect(ready.status == 503)
            #expect((ready.field("reason") as? String)?.contains("draining") == true, "\(ready.text)")
            // Still draining (held): the listener keeps answering.
            #expect(try await http.get("/healthz").status == 200)
            hold.finish()
            await stopping.value
        }
    }

    @Test func metricsShowJobAndQueueFiguresAfterJobsRan() async throws {
        _ = TestMetricsOnce.shared
        let q = try await TestQueue.make()
        let noops = try await q.queue.enqueue((0..<5).map { _ in NewJob(kind: .drillNoop) })
        let doomed = try await q.queue.enqueue([try NewJob(DrillScript(permanent: true), maxAttempts: 1)])
        let delayed = try await q.queue.enqueue((0..<3).map { _ in NewJob(kind: .imageNormalize, delay: .seconds(3600)) })
        // One job released, one ended DEPENDENCY_FAILED, one still waiting.
        var released = NewJob(kind: .drillNoop), failed = NewJob(kind: .imageNormalize), waiting = NewJob(kind: .imageNormalize)
        (released.after, failed.after, waiting.after) = ([noops[0].id], [doomed[0].id], [delayed[0].id])
        _ = try await q.queue.enqueue([released, failed, waiting])
        let worker = RunningWorker(q, handlers: [NoopHandler(), ScriptHandler()], concurrency: [.drillNoop: 4, .drillScript: 1])
        try await q.waitUntil("jobs ran") { try await q.states() == [.completed: 6, .dead: 1, .available: 3, .waiting: 1, .cancelled: 1] }
        try await worker.stop()

        let gauges = QueueGauges(queue: q.queue, kinds: FleetKinds.all, interval: .milliseconds(100), logger: testLogger)
        try await DispatcherHTTPHarness.with(databaseURL: q.url, services: [gauges]) { http in
            try await q.waitUntil("gauges refreshed") {
                let text = try await http.get("/metrics").text
                // The refresh sets the kinds' gauges, then the limits', then the dependencies'.
                return metricValue(text, #"fleet_queue_jobs{kind="image.normalize",state="scheduled"}"#) == 3
                    && metricValue(text, "fleet_queue_dependency_failures") != nil
            }
            let response = try await http.get("/metrics")
            #expect(response.status == 200)
            #expect(response.headers.first { $0.key.lowercased() == "content-type" }?.value.hasPrefix("text/plain") == true)
            let text = response.text
            #expect(metricValue(text, #"fleet_jobs_claimed_total{kind="drill.noop"}"#).map { $0 >= 5 } == true, "\(text)")
            #expect(metricValue(text, #"fleet_jobs_finished_total{kind="drill.noop",outcome="completed"}"#).map { $0 >= 5 } == true)
            #expect(metricValue(text, #"fleet_jobs_finished_total{kind="drill.script",outcome="dead"}"#).map { $0 >= 1 } == true)
            // Timers are histograms in seconds, with buckets past the 30 s render deadline.
            #expect(metricValue(text, #"fleet_job_duration_seconds_count{kind="drill.noop"}"#).map { $0 >= 5 } == true)
            #expect(text.contains(#"fleet_job_duration_seconds_bucket{kind="drill.noop",le="60"#))
            #expect(metricValue(text, #"fleet_queue_jobs{kind="drill.noop",state="due"}"#) == 0)
            #expect(metricValue(text, #"fleet_queue_dead_last_hour{kind="drill.script"}"#) == 1)
            #expect(metricValue(text, #"fleet_queue_oldest_due_seconds{kind="image.normalize"}"#) == 0)
            #expect(metricValue(text, #"fleet_queue_retrying_jobs{kind="render.run"}"#) == 0, "every kind the fleet knows is reported")
            #expect(metricValue(text, #"fleet_queue_jobs{kind="image.normalize",state="waiting"}"#) == 1)
            #expect(metricValue(text, #"fleet_queue_dependency_failed_last_hour{kind="image.normalize"}"#) == 1)
            #expect(metricValue(text, "fleet_queue_dependency_releases") == 1)
            #expect(metricValue(text, "fleet_queue_dependency_failures") == 1)
        }
    }

    /// A session holding a snapshot in the fleet's database (a `pg_dump`'s transaction) shows in
    /// the horizon gauges, by age in transactions and seconds, and by name in the measure the
    /// console prints; once it ends it is gone from them.
    @Test func aHeldSnapshotShowsInTheHorizonGauges() async throws {
        _ = TestMetricsOnce.shared
        let q = try await TestQueue.make()
        let dump = try await PostgresConnection.connect(q.url, applicationName: "nightly-dump")
        try await dump.query("BEGIN ISOLATION LEVEL REPEATABLE READ")
        _ = try await dump.query("SELECT 1 FROM jobs LIMIT 1")
        for _ in 0..<3 { _ = try await q.queue.enqueue(NewJob(kind: .drillNoop)) }

        let held = try await SnapshotHorizon.measure(on: q.pool)
        #expect(held.holder == "nightly-dump (idle in transaction)")
        #expect(held.oldestXids.map { $0 >= 3 } == true, "\(held)")
        #expect(held.oldestSeconds.map { $0 > 0 } == true, "\(held)")
        #expect(held.replicaFeedbackXids == nil, "no replica in the test cluster")

        let gauges = QueueGauges(queue: q.queue, kinds: FleetKinds.all, interval: .milliseconds(100), horizon: q.pool, logger: testLogger)
        try await DispatcherHTTPHarness.with(databaseURL: q.url, services: [gauges]) { http in
            try await q.waitUntil("horizon gauges refreshed") {
                let text = try await http.get("/metrics").text
                return metricValue(text, "fleet_db_oldest_snapshot_xids").map { $0 >= 3 } == true
                    && metricValue(text, "fleet_db_oldest_snapshot_seconds").map { $0 > 0 } == true
                    && metricValue(text, "fleet_db_replica_feedback_xids") == 0
            }
        }
        try await dump.query("ROLLBACK")
        #expect(try await SnapshotHorizon.measure(on: q.pool).holder != held.holder)
    }
}
