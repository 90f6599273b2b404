@testable import DispatcherCore
@testable import FleetQueue
import FleetPostgres
@testable import FleetTestSupport
import Foundation
import Testing

/// What each of the queue's recurring statements reads while a snapshot is held, in buffers of
/// `jobs`, its indexes and `job_count_changes` and entries of those indexes, after N and after 4N jobs went through (enqueue,
/// claim, finish, prune, fold): a statement whose count grows with N slows down with the hold's
/// age (docs/reliability.md, "Held snapshot"). Counted in buffers, not in time.
@Suite struct HeldSnapshotStatementCostTests {
    let owner = "held-snapshot-cost"

    /// Buffers of `jobs`, its indexes and `job_count_changes` the transaction touched so far,
    /// plus the entries its scans read from the indexes of `jobs` (a walk over dead entries stays
    /// on a few heap pages when they lie together, so buffers alone barely show it).
    static let buffersSQL = """
        SELECT (coalesce(sum(pg_stat_get_xact_blocks_fetched(c.oid)), 0)
                + coalesce(sum(pg_stat_get_xact_tuples_returned(c.oid)) FILTER (WHERE c.relkind = 'i'), 0))::bigint AS blocks
        FROM pg_class c
        WHERE c.oid IN ('jobs'::regclass, 'job_count_changes'::regclass)
           OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'jobs'::regclass)
        """

    /// Runs `body` in a transaction on a connection of its own; the buffers it touched.
    func buffers(_ q: TestQueue, _ body: (PostgresQueueDriver) async throws -> Void) async throws -> Int {
        let connection = try await PostgresConnection.connect(q.url)
        try await connection.query("BEGIN")
        let before = try await connection.query(Self.buffersSQL).rows[0].int("blocks")
        try await body(PostgresQueueDriver(executor: connection))
        let after = try await connection.query(Self.buffersSQL).rows[0].int("blocks")
        try await connection.query("COMMIT")
        return after - before
    }

    /// The pruner of every finished job, its frontier shared by its runs (no restart in the test).
    let pruneFrontier = PruneFrontier(restartEvery: .seconds(3600))
    func pruner(_ driver: PostgresQueueDriver) -> Pruner {
        Pruner(driver: driver, retention: Retention(completed: .zero, cancelled: .zero, dead: .zero), frontier: pruneFrontier, logger: testLogger)
    }

    /// Jobs `first..<first + jobs` through claim, finish, prune and fold, 500 at a time. They were
    /// due 10 ms apart three hours ago, so the last second before a claim's frontier (its lag)
    /// holds 100 of them however fast the machine runs the test.
    func cycle(_ q: TestQueue, first: Int, jobs: Int, frontiers: ClaimFrontiers) async throws {
        for start in stride(from: first, to: first + jobs, by: 500) {
            try await q.sql.query("""
                INSERT INTO jobs (kind, run_at)
                SELECT 'drill.noop', now() - interval '3 hours' + ($1 + g) * interval '10 ms' FROM generate_series(1, 500) AS g
                """, [start])
            let claimed = try await q.driver.jobClaim(ClaimRequest(owner: owner, lease: .seconds(30), slots: [.drillNoop: 500], frontiers: frontiers)).jobs
            _ = try await q.driver.jobFinishMany(owner: owner, outcomes: claimed.map {
                JobOutcome(jobID: $0.id, attempt: $0.attempt, kind: .completed(result: nil))
            })
            try await pruner(q.driver).runOnce(batch: 100)
            _ = try await q.driver.jobFoldCounts()
        }
    }

    func measure(_ q: TestQueue, frontiers: ClaimFrontiers) async throws -> [String: Int] {
        var costs: [String: Int] = [:]
        var ids: [Int64] = []
        costs["enqueue"] = try await buffers(q) { driver in
            ids = try await JobQueue(driver: driver, knownKinds: FleetKinds.all).enqueue((0..<10).map { _ in NewJob(kind: .drillNoop) }).map(\.id)
        }
        var claimed: [ClaimedJob] = []
        costs["claim"] = try await buffers(q) { driver in
            claimed = try await driver.jobClaim(ClaimRequest(owner: owner, lease: .seconds(30), slots: [.drillNoop: 10], frontiers: frontiers)).jobs
        }
        #expect(claimed.count == ids.count)
        _ = try await JobQueue(driver: q.driver, knownKinds: FleetKinds.all).enqueue((0..<10).map { _ in NewJob(kind: .drillScript) })
        costs["claim from the start"] = try await buffers(q) { driver in
            _ = try await driver.jobClaim(ClaimRequest(owner: owner, lease: .seconds(30), slots: [.drillNoop: 10, .drillScript: 10])).jobs
        }
        costs["heartbeat"] = try await buffers(q) { driver in
            _ = try await driver.jobExtendLeases(owner: owner, ids: claimed.map(\.id), lease: .seconds(30))
        }
        costs["finish"] = try await buffers(q) { driver in
            _ = try await driver.jobFinishMany(owner: owner, outcomes: claimed.map {
                JobOutcome(jobID: $0.id, attempt: $0.attempt, kind: .completed(result: nil))
            })
        }
        costs["rescue"] = try await buffers(q) { driver in _ = try await driver.jobRescueExpired(limit: 100) }
        costs["reap"] = try await buffers(q) { driver in _ = try await driver.workerReapLost() }
        costs["prune"] = try await buffers(q) { driver in try await pruner(driver).runOnce(batch: 100) }
        costs["fold"] = try await buffers(q) { driver in _ = try await driver.jobFoldCounts() }
        return costs
    }

    /// 2,000 then 8,000 jobs through enqueue, claim, finish and prune under one held snapshot:
    /// what the worker and the pruner run for each new job reads about the same buffers after
    /// four times the dead versions (measured, buffers and entries: claim 286 → 194, enqueue 53 →
    /// 53, finish 227 → 225, heartbeat 178 → 180, prune 2,704 → 2,193, fold 5 → 5, rescue 21 → 21,
    /// reap 25 → 25; the prune's figure is the 500 jobs one finish statement ended in the same
    /// instant, which each batch starting at that instant walks again). A claim from the index's
    /// start grows with the dead versions: the reason its restarts are spaced out
    /// (`ClaimFrontier.restartCostFactor`). `HeldSnapshotPruneTests` counts the pruner's walk. (The rescue's leases here have not expired, so the dead
    /// entries of `jobs_lease_idx` lie past its range; docs/reliability.md says where it walks.)
    @Test func whatTheQueueRunsPerJobDoesNotGrowWithAHeldSnapshot() async throws {
        let q = try await TestQueue.make()
        let holder = try await HeldSnapshotClaimTests().holdSnapshot(q)
        let frontiers = ClaimFrontiers(restartEvery: .seconds(3600))
        try await cycle(q, first: 0, jobs: 2_000, frontiers: frontiers)
        let small = try await measure(q, frontiers: frontiers)
        try await cycle(q, first: 2_000, jobs: 6_000, frontiers: frontiers)
        let large = try await measure(q, frontiers: frontiers)
        for name in small.keys.sorted() where name != "claim from the start" {
            #expect(large[name]! <= small[name]! * 3 / 2 + 20,
                    "\(name): \(small[name]!) buffers and entries after 2,000 jobs, \(large[name]!) after 8,000")
        }
        #expect(large["claim from the start"]! >= small["claim from the start"]! + 100,
                "the held snapshot keeps the claimed jobs' entries for a claim from the start")
        try await holder.query("ROLLBACK")
    }
}
