@testable import FleetQueue
import FleetPostgres
@testable import FleetTestSupport
import Foundation
import Synchronization
import Testing

/// The claim under a held snapshot (`ClaimFrontier`, docs/reliability.md "Held snapshot"): while
/// a session holds an old snapshot no dead entry of `jobs_claim_idx` can be skipped, so a claim
/// that walks the index from its start visits every job claimed since; a claim past the
/// frontier walks only the newest ones. Counted in index entries read, not in time.
@Suite struct HeldSnapshotClaimTests {
    let owner = "held-snapshot-test"

    /// A clock the test moves: a frontier's age without waiting.
    final class TestClock: Sendable {
        let seconds = Mutex(1_000.0)
        func advance(_ by: Double) { seconds.withLock { $0 += by } }
    }

    /// A session that holds a snapshot in the test's database, as `pg_dump` does.
    func holdSnapshot(_ q: TestQueue) async throws -> PostgresConnection {
        let holder = try await PostgresConnection.connect(q.url)
        try await holder.query("BEGIN ISOLATION LEVEL REPEATABLE READ")
        _ = try await holder.query("SELECT 1 FROM jobs LIMIT 1")
        return holder
    }

    /// A held snapshot, then 5,000 jobs due over the last two hours.
    func holdSnapshotOverDueJobs(_ q: TestQueue) async throws -> PostgresConnection {
        let holder = try await holdSnapshot(q)
        try await q.sql.query("""
            INSERT INTO jobs (kind, run_at)
            SELECT 'drill.noop', now() - interval '2 hours' + g * interval '1 second' FROM generate_series(1, 5000) AS g
            """)
        return holder
    }

    /// Claims and completes every available job, `batch` at a time, with `frontiers`.
    func drain(_ q: TestQueue, frontiers: ClaimFrontiers, batch: Int) async throws -> Int {
        var total = 0
        while true {
            let jobs = try await q.driver.jobClaim(ClaimRequest(owner: owner, lease: .seconds(30), slots: [.drillNoop: batch], frontiers: frontiers)).jobs
            if jobs.isEmpty { return total }
            total += jobs.count
            _ = try await q.driver.jobFinishMany(owner: owner, outcomes: jobs.map {
                JobOutcome(jobID: $0.id, attempt: $0.attempt, kind: .completed(result: nil))
            })
        }
    }

    /// One claim through the driver on a connection of its own, in a transaction that reads the
    /// index entries its scans returned (the transaction's `idx_tup_read`,
    /// `pg_stat_get_xact_tuples_returned`: entries that
    /// LP_DEAD lets a scan skip are not counted, those a held snapshot keeps are).
    func entriesReadByClaim(_ q: TestQueue, frontiers: ClaimFrontiers?) async throws -> (jobs: [ClaimedJob], entries: Int) {
        let connection = try await PostgresConnection.connect(q.url)
        let read = "SELECT pg_stat_get_xact_tuples_returned('jobs_claim_idx'::regclass) AS idx_tup_read"
        try await connection.query("BEGIN")
        let before = try await connection.query(read).rows[0].int("idx_tup_read")
        let jobs = try await PostgresQueueDriver(executor: connection).jobClaim(
            ClaimRequest(owner: owner, lease: .seconds(30), slots: [.drillNoop: 100], frontiers: frontiers)).jobs
        let after = try await connection.query(read).rows[0].int("idx_tup_read")
        try await connection.query("COMMIT")
        return (jobs, after - before)
    }

    /// 5,000 jobs due over the last two hours, claimed and completed while a snapshot is held,
    /// then ten new ones: the claim past the frontier reads a handful of entries, the claim from
    /// the index's start (what every claim did before the frontier) reads all 5,000 dead ones.
    @Test func aClaimPastTheFrontierSkipsTheDeadEntriesAHeldSnapshotKeeps() async throws {
        let q = try await TestQueue.make()
        let holder = try await holdSnapshotOverDueJobs(q)
        let clock = TestClock()
        let frontiers = ClaimFrontiers(restartEvery: .seconds(3600)) { clock.seconds.withLock { $0 } }
        #expect(try await drain(q, frontiers: frontiers, batch: 500) == 5_000)
        _ = try await q.queue.enqueue((0..<10).map { _ in NewJob(kind: .drillNoop) })

        let pastFrontier = try await entriesReadByClaim(q, frontiers: frontiers)
        #expect(pastFrontier.jobs.count == 10)
        #expect(pastFrontier.entries <= 20, "a claim past the frontier read \(pastFrontier.entries) index entries")

        _ = try await q.queue.enqueue((0..<10).map { _ in NewJob(kind: .drillNoop) })
        let fromStart = try await entriesReadByClaim(q, frontiers: nil)
        #expect(fromStart.jobs.count == 10)
        #expect(fromStart.entries >= 5_000, "the held snapshot keeps the dead entries: \(fromStart.entries) read from the start")
        try await holder.query("ROLLBACK")
    }

    /// A restart walks every dead entry a held snapshot keeps; the next one waits for
    /// `restartCostFactor` times as long as it took. The test's clock moves a quarter of a second
    /// at every reading, so each claim "takes" 0.25 s: with a 1 s interval, ten claims 1.1 s apart
    /// after the drain make one restart (the one whose 12.5 s had passed), not ten.
    @Test func aSlowRestartPutsOffTheNextOne() async throws {
        let q = try await TestQueue.make()
        let holder = try await holdSnapshotOverDueJobs(q)
        let clock = TestClock()
        let frontiers = ClaimFrontiers(restartEvery: .seconds(1)) { clock.seconds.withLock { $0 += 0.25; return $0 } }
        #expect(try await drain(q, frontiers: frontiers, batch: 500) == 5_000)
        var restarts = 0
        for _ in 0..<10 {
            _ = try await q.queue.enqueue((0..<10).map { _ in NewJob(kind: .drillNoop) })
            clock.advance(1.1)
            let claim = try await entriesReadByClaim(q, frontiers: frontiers)
            #expect(claim.jobs.count == 10)
            if claim.entries >= 5_000 { restarts += 1 }
        }
        #expect(restarts == 1, "\(restarts) of 10 claims walked the 5,000 dead entries from the start")
        try await holder.query("ROLLBACK")
    }

    /// The restart's bound as a value: the frontier holds until `restartEvery` and
    /// `restartCostFactor` times the last restart's duration have both passed.
    @Test func theNextRestartWaitsForFiftyTimesTheLastOnesDuration() {
        var frontier = ClaimFrontier()
        let newest = ClaimFrontier.Seek(priority: 1, runAt: 500)
        frontier.claimed(from: .start, newest: newest, startedAt: 100, now: 100.5)
        #expect(frontier.seek(now: 101.6, restartEvery: 1) == ClaimFrontier.Seek(priority: 1, runAt: 499))
        #expect(frontier.seek(now: 125.4, restartEvery: 1) != .start)
        #expect(frontier.seek(now: 125.5, restartEvery: 1) == .start)
        frontier.claimed(from: .start, newest: newest, startedAt: 125.5, now: 125.501)
        #expect(frontier.seek(now: 126.4, restartEvery: 1) != .start)
        #expect(frontier.seek(now: 126.501, restartEvery: 1) == .start, "a fast restart brings back the plain interval")
    }

    /// Jobs that become due behind the frontier, a retry whose run-at is older than the frontier
    /// and a job of a higher priority (a lower number), are claimed by the first claim once the
    /// frontier is `restartEvery` old, before the jobs past the frontier, in the claim's order.
    @Test func jobsDueBehindTheFrontierAreClaimedWhenItRestarts() async throws {
        let q = try await TestQueue.make()
        let clock = TestClock()
        let frontiers = ClaimFrontiers(restartEvery: .seconds(5)) { clock.seconds.withLock { $0 } }
        let claim = { (slots: Int) in
            try await q.driver.jobClaim(ClaimRequest(owner: owner, lease: .seconds(30), slots: [.drillNoop: slots], frontiers: frontiers)).jobs
        }
        let failing = try await q.queue.enqueue(NewJob(kind: .drillNoop, priority: 5))
        let first = try await claim(1)
        #expect(first.map(\.id) == [failing.id])
        _ = try await q.driver.jobFinishMany(owner: owner, outcomes: [
            JobOutcome(jobID: failing.id, attempt: 1, kind: .retry(error: "boom", code: nil, retryIn: .seconds(60)))])
        // Later jobs move the frontier past the retry's run-at once it is due.
        try await q.travelInTime(.seconds(120))
        let later = try await q.queue.enqueue((0..<3).map { _ in NewJob(kind: .drillNoop, priority: 5) })
        let advanced = try await claim(1)
        #expect(advanced.map(\.id) == [later[0].id], "the frontier's claim takes what lies past it")
        let urgent = try await q.queue.enqueue(NewJob(kind: .drillNoop, priority: 0))

        clock.advance(6)
        let restarted = try await claim(10)
        #expect(restarted.map(\.id) == [urgent.id, failing.id, later[1].id, later[2].id])
        #expect(restarted.first { $0.id == failing.id }?.attempt == 2)
    }

    /// Until it is `restartEvery` old the frontier holds: the bound docs/reliability.md states
    /// (a job behind it waits at most that long), and the reason the restart is not free.
    @Test func aFrontierYoungerThanItsRestartIntervalPassesOverJobsBehindIt() async throws {
        let q = try await TestQueue.make()
        let clock = TestClock()
        let frontiers = ClaimFrontiers(restartEvery: .seconds(5)) { clock.seconds.withLock { $0 } }
        let claim = {
            try await q.driver.jobClaim(ClaimRequest(owner: owner, lease: .seconds(30), slots: [.drillNoop: 10], frontiers: frontiers)).jobs
        }
        _ = try await q.queue.enqueue(NewJob(kind: .drillNoop, priority: 5))
        #expect(try await claim().count == 1)
        let urgent = try await q.queue.enqueue(NewJob(kind: .drillNoop, priority: 0))
        clock.advance(4)
        #expect(try await claim().isEmpty)
        clock.advance(1)
        #expect(try await claim().map(\.id) == [urgent.id])
    }

    /// With a restart interval of zero every claim starts at the index's start, as without a frontier.
    @Test func aZeroRestartIntervalClaimsFromTheStartEveryTime() async throws {
        let q = try await TestQueue.make()
        let frontiers = ClaimFrontiers(restartEvery: .zero)
        _ = try await q.queue.enqueue(NewJob(kind: .drillNoop, priority: 5))
        #expect(try await q.driver.jobClaim(ClaimRequest(owner: owner, lease: .seconds(30), slots: [.drillNoop: 10], frontiers: frontiers)).jobs.count == 1)
        let urgent = try await q.queue.enqueue(NewJob(kind: .drillNoop, priority: 0))
        #expect(try await q.driver.jobClaim(ClaimRequest(owner: owner, lease: .seconds(30), slots: [.drillNoop: 10], frontiers: frontiers)).jobs.map(\.id) == [urgent.id])
    }
}
