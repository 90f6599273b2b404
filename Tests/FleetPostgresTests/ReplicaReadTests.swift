import DispatcherProtocol
import FleetPostgres
import FleetSchema
@testable import FleetTestSupport
import Foundation
import Testing

/// `FLEET_READ_DATABASE_URL`: the dispatcher's reads that decide nothing (`stats`, `jobs.list`,
/// `audit.list`, the console's pages) go to a streaming standby; every write and `status` stay
/// on the primary. Proved by pausing the standby's replay: what was written since is seen by the
/// primary's answers and not by the replica's, until replay resumes.
@Suite(.serialized) struct ReplicaReadTests {
    @Test func listsStatsAuditAndPagesReadTheReplicaWhileStatusReadsThePrimary() async throws {
        let pair = try await StandbyPair.start(name: "test-replica")
        do {
            try await check(pair)
        } catch {
            await pair.stop()
            throw error
        }
        await pair.stop()
    }

    private func check(_ pair: StandbyPair) async throws {
        try await Migrator(migrations: FleetSchema.migrations, logger: testLogger).migrate(conninfo: pair.primaryURL)
        let dispatcher = try DispatcherProcess(databaseURL: pair.primaryURL, environment: [
            "FLEET_READ_DATABASE_URL": pair.standbyURL, "FLEET_CONSOLE": "on",
        ])
        try await dispatcher.start()
        defer { dispatcher.signal(SIGKILL) }
        let client = try await dispatcher.client()
        let standby = try await PostgresConnection.connect(pair.standbyURL)
        let replayed = try await client.enqueue(kind: "drill.script")
        try await waitUntil("the standby replays the first job") {
            try await standby.query("SELECT count(*) AS n FROM jobs WHERE id = $1", [replayed.jobId]).rows[0].int("n") == 1
        }

        try await standby.query("SELECT pg_wal_replay_pause()")
        let unreplayed = try await client.enqueue(kind: "drill.script")
        _ = try await client.pause(kind: "image.normalize")
        // Decisions read the primary.
        #expect(try await client.status(jobId: unreplayed.jobId).id == unreplayed.jobId)
        // Lists, stats and the audit trail read the replica, which has not replayed them.
        let listed = try await client.listJobs().jobs.map(\.id)
        #expect(listed.contains(replayed.jobId))
        #expect(!listed.contains(unreplayed.jobId))
        let drill = try await client.stats().kinds.first { $0.kind == "drill.script" }
        #expect(drill?.due == 1)
        #expect(try await client.auditTrail().entries.allSatisfy { $0.action != "queue.pause" })
        let readers = try await standby.query("""
            SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'dispatcher-read'
            """).rows[0].int("n")
        #expect(readers >= 1)

        // The console's overview reads the replica too, and shows how far behind it is.
        let console = ReplicaConsole(port: dispatcher.httpPort)
        let (session, _) = try await console.login(DispatcherProcess.token)
        try await Task.sleep(for: .milliseconds(1100))
        let page = try await console.get("/console/live/overview", session: session).body
        #expect(page.contains("Pages read from a replica: replay lag"))
        #expect(!page.contains("replay lag 0.00 s"), "replay is paused behind a commit: the lag grows")

        try await standby.query("SELECT pg_wal_replay_resume()")
        try await waitUntil("jobs.list shows the job once the replica replays it") {
            try await client.listJobs().jobs.contains { $0.id == unreplayed.jobId }
        }
        #expect(try await client.auditTrail().entries.contains { $0.action == "queue.pause" })
        await client.close()
    }

    private func waitUntil(_ what: String, _ condition: () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while !(try await condition()) {
            guard ContinuousClock.now < deadline else { throw TestFailure("timed out waiting until \(what)") }
            try await Task.sleep(for: .milliseconds(50))
        }
    }
}

private struct ReplicaConsole: ConsoleClient {
    let port: Int
}
