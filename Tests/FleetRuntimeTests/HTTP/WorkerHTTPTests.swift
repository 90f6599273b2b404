import DrillKinds
import FleetHTTPClient
@testable import FleetPostgres
@testable import FleetQueue
@testable import FleetTestSupport
import Foundation
import Testing

/// A worker executable (`fleet-drill`) started as a process with `FLEET_HTTP_ADDRESS`: its
/// probes and metrics over real HTTP, through a run and a drain.
@Suite struct WorkerHTTPTests {
    @Test func aWorkerProcessServesProbesAndItsMetricsAndTurnsUnreadyWhenDraining() async throws {
        let q = try await TestQueue.make()
        let port = try freePort()
        let worker = try WorkerProcess(databaseURL: q.url, environment: [
            "FLEET_HTTP_ADDRESS": "127.0.0.1:\(port)", "FLEET_SHUTDOWN_GRACE_SECONDS": "10", "FLEET_CONCURRENCY": "drill.script=4",
        ])
        let client = CurlHTTPClient()
        func get(_ path: String) async throws -> HTTPClientResponse {
            try await client.execute(HTTPClientRequest(url: "http://127.0.0.1:\(port)\(path)", timeout: .seconds(5)))
        }
        _ = try await q.queue.enqueue((0..<20).map { _ in NewJob(kind: .drillNoop) })
        try await q.waitUntil("20 completed") { try await q.states()[.completed] == 20 }
        try await q.waitUntil("listening") { (try? await get("/healthz"))?.status == 200 }
        #expect(try await get("/readyz").status == 200)

        let metrics = try await get("/metrics")
        #expect(metrics.status == 200)
        let text = metrics.text
        #expect(metricValue(text, #"fleet_jobs_claimed_total{kind="drill.noop"}"#) == 20, "\(text)")
        #expect(metricValue(text, #"fleet_jobs_finished_total{kind="drill.noop",outcome="completed"}"#) == 20)
        #expect(metricValue(text, #"fleet_job_duration_seconds_count{kind="drill.noop"}"#) == 20)

        // A job that outlasts the signal keeps the drain going: not ready, still alive.
        // Long enough that the drain outlasts the checks below on a loaded machine (grace: 10 s).
        _ = try await q.queue.enqueue([try NewJob(DrillScript(sleepMs: 6_000))])
        try await q.waitUntil("running") { try await q.states()[.running] == 1 }
        worker.signal(SIGTERM)
        try await q.waitUntil("unready") { (try? await get("/readyz"))?.status == 503 }
        #expect(try await get("/healthz").status == 200)
        #expect(await worker.wait() == 0, "\(worker.log)")
        #expect(try await q.states()[.completed] == 21)
    }

    @Test func aWorkerAnswersItsProbesWhileItsMigrationsWait() async throws {
        let q = try await TestQueue.make()
        // Another migrator holds the lock: this worker's start-up waits on it.
        let migrator = try await PostgresConnection.connect(q.url)
        try await migrator.query("SELECT pg_advisory_lock($1)", [Migrator.lockKey])
        let port = try freePort()
        let worker = try WorkerProcess(databaseURL: q.url, environment: ["FLEET_HTTP_ADDRESS": "127.0.0.1:\(port)"])
        let client = CurlHTTPClient()
        func get(_ path: String) async throws -> HTTPClientResponse {
            try await client.execute(HTTPClientRequest(url: "http://127.0.0.1:\(port)\(path)", timeout: .seconds(5)))
        }
        try await q.waitUntil("alive") {
            // Ended (its port taken between freePort and its bind, on a busy machine): say why.
            if let status = worker.child.exitStatus { throw TestFailure("the worker exited \(status): \(worker.log.suffix(1500))") }
            return (try? await get("/healthz"))?.status == 200
        }
        let starting = try await get("/readyz")
        #expect(starting.status == 503 && starting.text.contains("starting"), "\(starting.text)")
        _ = try await q.queue.enqueue([NewJob(kind: .drillNoop)])
        // Not run: a "not", so a window (two of the worker's 200 ms polls and its NOTIFY), the
        // worker alive and answering its probes meanwhile.
        try await Task.sleep(for: .milliseconds(500))
        #expect(try await q.states()[.available] == 1, "no job runs before the migrations")

        try await migrator.query("SELECT pg_advisory_unlock($1)", [Migrator.lockKey])
        try await q.waitUntil("ready") { (try? await get("/readyz"))?.status == 200 }
        try await q.waitUntil("the job ran") { try await q.states()[.completed] == 1 }
        worker.signal(SIGTERM)
        #expect(await worker.wait() == 0, "\(worker.log)")
    }

    @Test func aPortAlreadyInUseStopsTheWorkerNamingTheVariable() async throws {
        let q = try await TestQueue.make()
        let port = try freePort()
        let first = try WorkerProcess(databaseURL: q.url, environment: ["FLEET_HTTP_ADDRESS": "127.0.0.1:\(port)"])
        let client = CurlHTTPClient()
        try await q.waitUntil("first listening") {
            (try? await client.execute(HTTPClientRequest(url: "http://127.0.0.1:\(port)/healthz", timeout: .seconds(2))))?.status == 200
        }
        let second = try WorkerProcess(databaseURL: q.url, environment: ["FLEET_HTTP_ADDRESS": "127.0.0.1:\(port)"])
        #expect(await second.wait(timeout: .seconds(30)) != 0)
        #expect(second.log.contains("FLEET_HTTP_ADDRESS"), "\(second.log)")
        first.signal(SIGTERM)
        #expect(await first.wait() == 0, "\(first.log)")
    }
}
