@testable import FleetQueue
import FleetPostgres
@testable import FleetTestSupport
import Foundation
import Testing

/// The pruner under a held snapshot (`PruneFrontier`, docs/reliability.md "Held snapshot"):
/// while a session holds an old snapshot the entries of deleted jobs stay in `jobs_finished_idx`
/// unmarked, so a delete from the oldest finished job walks every job deleted since. Counted in
/// index entries read, not in time.
@Suite struct HeldSnapshotPruneTests {
    let retention = Retention(completed: .seconds(3600), cancelled: .seconds(3600), dead: .seconds(3600))

    /// `count` completed jobs that finished `hoursAgo` hours ago and later, ten to an instant
    /// (as a batched finish writes them).
    func insertFinished(_ q: TestQueue, count: Int, hoursAgo: Int, state: String = "completed") async throws {
        try await q.sql.query("""
            INSERT INTO jobs (kind, state, finished_at)
            SELECT 'drill.noop', '\(state)', now() - make_interval(hours => $2) + (g / 10) * interval '10 ms'
            FROM generate_series(1, $1) AS g
            """, [count, hoursAgo])
        // Analysed, as autovacuum keeps a busy table: without statistics the planner reads every
        // finished job in the range and sorts them, frontier or not.
        try await q.sql.query("ANALYZE jobs")
    }

    /// One pruner run on a connection of its own, in a transaction that counts the entries its
    /// scans read from `jobs_finished_idx` (`pg_stat_get_xact_tuples_returned`).
    func run(_ pruner: (PostgresQueueDriver) -> Pruner, _ q: TestQueue) async throws -> (deleted: Int, entries: Int) {
        let connection = try await PostgresConnection.connect(q.url)
        let read = "SELECT pg_stat_get_xact_tuples_returned('jobs_finished_idx'::regclass) AS idx_tup_read"
        try await connection.query("BEGIN")
        let before = try await connection.query(read).rows[0].int("idx_tup_read")
        let deleted = try await pruner(PostgresQueueDriver(executor: connection)).runOnce(batch: 100)
        let after = try await connection.query(read).rows[0].int("idx_tup_read")
        try await connection.query("COMMIT")
        return (deleted, after - before)
    }

    /// 5,000 jobs pruned under a held snapshot, then 1,000 more: each run reads about the entries
    /// of the jobs it deletes (each batch from where the last ended, the second run from where the
    /// first ended), where a delete from the oldest finished job read every earlier batch's again
    /// (61,501 entries for the second run's 1,000 jobs, 132,500 for the first's 5,000). The restart
    /// a minute later reads them all once, and deletes a dead job whose longer retention ran out
    /// behind the frontier.
    @Test func aPruneUnderAHeldSnapshotReadsOnlyTheEntriesOfWhatItDeletes() async throws {
        let q = try await TestQueue.make()
        let holder = try await HeldSnapshotClaimTests().holdSnapshot(q)
        let clock = HeldSnapshotClaimTests.TestClock()
        let state = PruneFrontier(restartEvery: .seconds(60), clock: { clock.seconds.withLock { $0 } })
        let pruner = { (driver: PostgresQueueDriver) in
            Pruner(driver: driver, retention: retention, frontier: state, logger: testLogger)
        }
        try await insertFinished(q, count: 5_000, hoursAgo: 3)
        let first = try await run(pruner, q)
        #expect(first.deleted == 5_000)
        #expect(first.entries <= 5_000 + 50 * 10, "the first run read \(first.entries) entries for 5,000 jobs")

        try await insertFinished(q, count: 1_000, hoursAgo: 2)
        try await insertFinished(q, count: 1, hoursAgo: 4, state: "dead")
        let second = try await run(pruner, q)
        #expect(second.deleted == 1_000, "the dead job behind the frontier waits for the restart")
        #expect(second.entries <= 1_000 + 10 * 10, "the second run read \(second.entries) entries for 1,000 jobs")

        clock.advance(60)
        let restarted = try await run(pruner, q)
        #expect(restarted.deleted == 1)
        #expect(restarted.entries >= 6_000, "the held snapshot keeps the deleted jobs' entries: \(restarted.entries) read from the oldest")
        try await holder.query("ROLLBACK")
    }
}
