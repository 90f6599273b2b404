@testable import FleetQueue
@testable import DispatcherProtocol
@testable import FleetTestSupport
import Foundation
@testable import Renders
import Testing

/// `wait` and `render.wait` held open while PostgreSQL restarts: a restart shorter than what is
/// left of the timeout is invisible to the waiting client (`docs/operations.md`).
@Suite struct WaitAcrossRestartTests {
    @Test(arguments: [PostgresCluster.ShutdownMode.fast, .immediate])
    func waitsSurviveADatabaseRestart(_ mode: PostgresCluster.ShutdownMode) async throws {
        try await PostgresCluster.withPrivate { cluster in
            // Render waiters look again every 100 ms, so some of their reads land while the
            // server is down: those reads must be retried, not answered UNAVAILABLE.
            try await TestDispatcher.run(cluster: cluster, renderRecheck: .milliseconds(100)) { dispatcher in
                let pool = dispatcher.queue.pool
                let client = try await dispatcher.client()
                try await RenderOperationTests.grant(dispatcher, "u1", credits: 5)
                let job = try await dispatcher.queue.queue.enqueue(NewJob(kind: .drillNoop, payload: "{}"))
                _ = try await client.send(RenderOperationTests.request("r1"))

                async let jobWaits = withThrowingTaskGroup(of: WaitRequest.Result.self) { group in
                    for _ in 0..<3 { group.addTask { try await client.send(WaitRequest(jobId: job.id, timeoutMs: 40_000)) } }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                async let renderWaits = withThrowingTaskGroup(of: WaitRenderRequest.Result.self) { group in
                    for _ in 0..<3 { group.addTask { try await client.send(WaitRenderRequest(renderId: "r1", timeoutMs: 40_000)) } }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                // Every wait parked before the restart (three of each).
                try await dispatcher.waitUntilWaited(.job(job.id), count: 3)
                try await dispatcher.waitUntilWaited(.render("r1"), count: 3)
                // The test cluster commits without waiting for the WAL (fsync off): flush it, or
                // an immediate shutdown may take the render and the job with it.
                try await pool.query("CHECKPOINT")
                try await cluster.restart(mode)
                // Past the restart, with idle pooled connections that died with the old server.
                try await Task.sleep(for: .milliseconds(500))
                _ = try await pool.withRetry { connection in
                    try await connection.query("""
                        UPDATE jobs SET state = 'completed', finished_at = now() WHERE id = $1
                        """, [job.id])
                }
                try await pool.notify(QueueChannel.finished, [job.id])
                let store = RenderStore(pool: pool)
                let start = try await store.start(id: "r1")
                guard case .started = start else { Issue.record("r1 not started: \(start)"); return }
                #expect(try await store.complete(id: "r1", resultPath: "u1/renders/r1.jpg"))

                let (jobs, renders) = try await (jobWaits, renderWaits)
                #expect(jobs.count == 3 && jobs.allSatisfy { !$0.timedOut && $0.job.state == .completed })
                #expect(renders.count == 3 && renders.allSatisfy { !$0.timedOut && $0.render.status == .complete })
                await client.close()
            }
        }
    }
}
