import DrillKinds
import FleetPostgres
@testable import FleetQueue
import FleetSupport
@testable import FleetTestSupport
import Foundation
import Testing

/// The lease rescue on one worker of the fleet (`MaintenanceLeader`): the one whose LISTEN session
/// holds the leader's lock.
@Suite(.serialized) struct MaintenanceLeaderTests {
    /// The sessions holding the leader's lock on `q`'s database (an advisory lock is a database's
    /// own: each database's queue has its leader), by backend pid.
    private func leaderSessions(_ q: TestQueue) async throws -> [Int] {
        try await q.pool.query("""
            SELECT pid FROM pg_locks
            WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
              AND classid = ($1::integer)::oid AND objid = ($2::integer)::oid AND objsubid = 2
            """, [Int(MaintenanceLeader.lockKey.0), Int(MaintenanceLeader.lockKey.1)]).rows.map { try $0.int("pid") }
    }

    /// Three workers, each with a notifier of its own as three processes have, a lease of 2 s (a
    /// rescue every second): only one ever looks for expired leases. When its session ends (it
    /// stops), another leads, and again only one.
    @Test func oneOfSeveralWorkersRescuesAndAnotherLeadsOnceItsSessionEnds() async throws {
        let q = try await TestQueue.make()
        let records = (0..<3).map { _ in LogRecord() }
        let workers = records.map { record in
            let notifier = Notifier(conninfo: q.url, logger: record.logger)
            let runtime = WorkerRuntime(
                executable: "test-worker", configuration: WorkerConfiguration(concurrency: [.drillNoop: 1], lease: .seconds(2)),
                driver: q.driver, notifier: notifier, handlers: [NoopHandler()], logger: record.logger)
            return RunningService(notifier, runtime)
        }
        let ran = "lease rescue ran"
        // Three rescues by one: every worker has been up for at least two of its periods.
        try await q.waitUntil(timeout: .seconds(60), "three rescues by one worker") { records.contains { $0.count(ran) >= 3 } }
        let leader = try #require(records.firstIndex { $0.count(ran) >= 3 })
        #expect(records.map { $0.count(ran) > 0 } == (0..<3).map { $0 == leader }, "\(records.map { $0.count(ran) })")
        #expect(records.map { $0.count("leading the lease rescue") } == (0..<3).map { $0 == leader ? 1 : 0 })
        #expect(try await leaderSessions(q).count == 1)

        try await workers[leader].stop()
        let others = (0..<3).filter { $0 != leader }
        try await q.waitUntil(timeout: .seconds(60), "another leads") { others.contains { records[$0].count("leading the lease rescue") > 0 } }
        let next = try #require(others.first { records[$0].count("leading the lease rescue") > 0 })
        let third = try #require(others.first { $0 != next })
        let before = records[next].count(ran)
        try await q.waitUntil(timeout: .seconds(60), "three rescues by the next leader") { records[next].count(ran) >= before + 3 }
        #expect(records[third].count(ran) == 0 && records[third].count("leading") == 0)
        #expect(try await leaderSessions(q).count == 1)
        for index in others { try await workers[index].stop() }
    }

    /// A leader killed with SIGKILL while it runs a job, with no dispatcher and no reaper: only
    /// the lease rescue can take the job back, and the worker that leads after it does, once its
    /// lease (2 s) ran out. The times printed are figures, not bounds.
    @Test func aKilledLeadersJobIsRescuedByTheWorkerLeadingAfterIt() async throws {
        let q = try await TestQueue.make()
        let environment = ["FLEET_LEASE_SECONDS": "2", "FLEET_LOG_LEVEL": "info"]
        let leading = "leading the lease rescue"
        let victim = try WorkerProcess(databaseURL: q.url, environment: environment)
        defer { victim.signal(SIGKILL) }
        try await q.waitUntil(timeout: .seconds(60), "the victim leads") { victim.log.contains(leading) }
        let job = try await q.queue.enqueue(try NewJob(DrillScript(sleepMs: 60_000)))
        try await q.waitUntil(timeout: .seconds(60), "running on the victim") { try await q.leaseOwnerPID(of: job.id) == victim.pid }
        let survivor = try WorkerProcess(databaseURL: q.url, environment: environment)
        defer { survivor.signal(SIGKILL) }
        try await q.waitUntilLocked([victim, survivor])
        #expect(!survivor.log.contains(leading))

        let killed = ContinuousClock.now
        let led = try await q.kill(victim, thenTimeUntil: "the survivor leads") { survivor.log.contains(leading) }
        try await q.waitUntil(timeout: .seconds(60), "claimed by the survivor") { try await q.leaseOwnerPID(of: job.id) == survivor.pid }
        let rescued = ContinuousClock.now - killed
        let record = try #require(try await q.queue.job(id: job.id))
        #expect(record.attempt == 2 && record.errors.map(\.code) == ["LEASE_EXPIRED"], "\(record)")
        #expect(await victim.wait() != 0)
        survivor.signal(SIGTERM)
        #expect(await survivor.wait() == 0, "\(survivor.log)")
        print("maintenance leader: SIGKILL to the survivor leading \(led), to the job rescued and claimed by it \(rescued) (lease 2 s)")
    }
}
