import FleetQueue
@testable import FleetTestSupport
import Foundation
import Renders
import Testing

/// One pool per worker process: the handlers share the runtime's, so a process opens at most
/// `FLEET_DB_POOL_SIZE` connections of its own (the LISTEN session is the notifier's, under its
/// own application name), counted at the server.
@Suite(.serialized) struct ConnectionsPerProcessTests {
    /// `application_name`'s connections to the test's database.
    static func serverConnections(_ q: TestQueue, applicationName: String) async throws -> Int {
        let database = URL(string: q.url)!.lastPathComponent
        return try await q.pool.query(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = $1 AND application_name = $2", [database, applicationName]
        ).rows[0].int("n")
    }

    @Test func aRenderWorkerOpensNoMoreConnectionsThanItsPoolSize() async throws {
        // Twelve renders at once at a fal taking 300 ms each: the claims, the renders' starts,
        // submissions and completions all want connections at the same time.
        let f = try await RenderFixture.atFal(latency: .milliseconds(300), credits: 12)
        defer { let fal = f.fal!; Task { await fal.stop() } }
        let worker = try WorkerProcess(
            databaseURL: f.q.url, executable: "render-worker", environment: f.workerEnvironment.merging(["FLEET_DB_POOL_SIZE": "2"]) { $1 })
        defer { worker.signal(SIGKILL) }
        var renders: [RenderRecord] = []
        for i in 1...12 { renders.append(try await f.request("r\(i)")) }
        try await f.q.waitUntil(timeout: .seconds(120), "12 renders complete") {
            var complete = 0
            for render in renders where try await f.reload(render).status == .complete { complete += 1 }
            return complete == 12
        }
        // The pool keeps the connections it opened: what is open now is what the process opened
        // (two pools of two opened three or four here).
        let opened = try await Self.serverConnections(f.q, applicationName: "render-worker")
        #expect((1...2).contains(opened), "render-worker holds \(opened) connections with FLEET_DB_POOL_SIZE=2\n\(worker.log)")
        worker.signal(SIGTERM)
        #expect(await worker.wait() == 0, "\(worker.log)")
    }
}
