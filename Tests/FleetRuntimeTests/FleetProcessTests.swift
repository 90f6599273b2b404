import DrillKinds
@testable import FleetQueue
import FleetStorage
import FleetSupport
@testable import FleetTestSupport
import Foundation
import Testing

/// Whole worker processes (`fleet-drill`) against a real PostgreSQL: crashes, restarts, drains.
@Suite(.serialized) struct FleetProcessTests {
    @Test func fourProcessesDrainTwentyThousandJobsEachExactlyOnce() async throws {
        let q = try await TestQueue.make()
        let log = temporaryPath("executions")
        let workers = try (0..<4).map { _ in try WorkerProcess(databaseURL: q.url, executionLog: log) }
        for start in stride(from: 0, to: 20_000, by: 5_000) {
            _ = try await q.queue.enqueue((start..<start + 5_000).map { NewJob(kind: .drillNoop, payload: #"{"n":\#($0)}"#) })
        }
        try await q.waitUntil(timeout: .seconds(180), "20,000 completed") { try await q.states()[.completed] == 20_000 }
        for worker in workers { worker.signal(SIGTERM) }
        for worker in workers { #expect(await worker.wait() == 0, "\(worker.log)") }

        let attempts = try await q.pool.query("SELECT max(attempt) AS most, min(attempt) AS least FROM jobs").rows[0]
        #expect(try attempts.int("most") == 1 && attempts.int("least") == 1)
        let executions = ExecutionLog.counts(log)
        #expect(executions.count == 20_000)
        #expect(executions.values.allSatisfy { $0 == 1 })
        let owners = try await q.pool.query("SELECT count(DISTINCT id) AS n FROM workers WHERE stopped_at IS NOT NULL").rows[0]
        #expect(try owners.int("n") == 4)
    }

    @Test func jobsOfAKilledWorkerAreCompletedByAnotherAfterTheLease() async throws {
        let q = try await TestQueue.make()
        let environment = ["FLEET_LEASE_SECONDS": "2", "FLEET_CONCURRENCY": "drill.script=10"]
        let victim = try WorkerProcess(databaseURL: q.url, environment: environment)
        let jobs = try await q.queue.enqueue((0..<10).map { _ in try NewJob(DrillScript(sleepMs: 1_500)) })
        try await q.waitUntil("victim running all") { try await q.states()[.running] == 10 }
        victim.signal(SIGKILL)
        #expect(await victim.wait() != 0)

        let survivor = try WorkerProcess(databaseURL: q.url, environment: environment)
        try await q.waitUntil(timeout: .seconds(60), "all completed") { try await q.states()[.completed] == 10 }
        survivor.signal(SIGTERM)
        #expect(await survivor.wait() == 0)
        for job in jobs {
            let record = try #require(try await q.queue.job(id: job.id))
            #expect(record.state == .completed && record.attempt == 2)
            #expect(record.errors.map(\.code) == ["LEASE_EXPIRED"])
        }
    }

    @Test func postgresRestartMidRunLosesNothing() async throws {
        try await PostgresCluster.withPrivate { cluster in
            let q = try await TestQueue.make(cluster: cluster)
            let workers = try (0..<2).map { _ in
                try WorkerProcess(databaseURL: q.url, environment: ["FLEET_CONCURRENCY": "drill.script=32"])
            }
            let total = 3_000
            _ = try await q.queue.enqueue((0..<total).map { _ in try NewJob(DrillScript(sleepMs: 5)) })
            try await q.waitUntil("a third done") { try await q.states()[.completed, default: 0] > total / 3 }
            try await cluster.restart()
            try await q.waitUntil(timeout: .seconds(120), "all completed") {
                (try? await q.pool.withRetry { _ in try await q.states() })?[.completed] == total
            }
            for worker in workers { worker.signal(SIGTERM) }
            for worker in workers { #expect(await worker.wait() == 0, "\(worker.log)") }
            #expect(try await q.states() == [.completed: total])
        }
    }

    @Test func sigtermFinishesRunningJobsAndHandsBackTheLongOnes() async throws {
        let q = try await TestQueue.make()
        let worker = try WorkerProcess(databaseURL: q.url, environment: [
            "FLEET_SHUTDOWN_GRACE_SECONDS": "1", "FLEET_CONCURRENCY": "drill.script=20",
        ])
        let short = try await q.queue.enqueue((0..<10).map { _ in try NewJob(DrillScript(sleepMs: 300)) })
        let long = try await q.queue.enqueue((0..<10).map { _ in try NewJob(DrillScript(sleepMs: 60_000)) })
        try await q.waitUntil("all running") { try await q.states()[.running] == 20 }
        worker.signal(SIGTERM)
        #expect(await worker.wait(timeout: .seconds(10)) == 0, "\(worker.log)")
        for job in short { #expect(try await q.queue.job(id: job.id)?.state == .completed) }
        for job in long {
            let record = try #require(try await q.queue.job(id: job.id))
            #expect(record.state == .available && record.attempt == 0)
        }
    }
}
