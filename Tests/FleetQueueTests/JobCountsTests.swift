@testable import DispatcherCore
import FleetPostgres
@testable import FleetQueue
@testable import FleetSupport
@testable import FleetTestSupport
import Foundation
import Testing

/// The finished jobs' counts (`job_counts`, `dead_job_counts` and the changes not folded yet,
/// `docs/queue.md`, "A large table") equal a `count(*)` of `jobs` after every way a job ends or
/// leaves: completions, deaths with and without a code, cancels, retries, lease rescues, the
/// sweep of unknown kinds, bulk and single retries and discards, a prune, an operator's `DELETE`,
/// finished rows inserted as they are, a `TRUNCATE`; before and after a fold, and with folds
/// running while jobs end.
@Suite struct JobCountsTests {
    let owner = "counts-worker"

    /// Finished jobs per minute, kind, state and code (the code only for dead and cancelled
    /// jobs), as the counts say and as `jobs` holds them.
    func minuteCounts(_ q: TestQueue) async throws -> (counted: [String: Int], actual: [String: Int]) {
        func read(_ sql: String) async throws -> [String: Int] {
            var counts: [String: Int] = [:]
            for row in try await q.sql.query(sql).rows {
                counts["\(try row.string("minute")) \(try row.string("kind")) \(try row.string("state")) \(row["code"] ?? "-")"] = try row.int("n")
            }
            return counts
        }
        let counted = try await read("""
            SELECT extract(epoch FROM minute)::bigint::text AS minute, kind, state::text, code, sum(n)::bigint AS n FROM (
                SELECT minute, kind, state, code, n FROM job_counts UNION ALL SELECT minute, kind, state, code, delta FROM job_count_changes
            ) AS c GROUP BY 1, 2, 3, 4 HAVING sum(n) <> 0
            """)
        let actual = try await read("""
            SELECT extract(epoch FROM date_trunc('minute', finished_at))::bigint::text AS minute, kind, state::text,
                   CASE WHEN state = 'completed' THEN NULL ELSE last_error_code END AS code, count(*) AS n
            FROM jobs WHERE finished_at IS NOT NULL AND state IN ('completed', 'dead', 'cancelled') GROUP BY 1, 2, 3, 4
            """)
        return (counted, actual)
    }

    /// Dead jobs per kind and code, as the console's groups say and as `jobs` holds them.
    func deadCounts(_ q: TestQueue) async throws -> (counted: [String: Int], actual: [String: Int]) {
        var counted: [String: Int] = [:]
        for group in try await q.driver.jobDeadGroups() { counted["\(group.kind) \(group.errorCode ?? "-")"] = group.count }
        var actual: [String: Int] = [:]
        for row in try await q.sql.query("SELECT kind, last_error_code AS code, count(*) AS n FROM jobs WHERE state = 'dead' GROUP BY 1, 2").rows {
            actual["\(try row.string("kind")) \(row["code"] ?? "-")"] = try row.int("n")
        }
        return (counted, actual)
    }

    /// `stats`' finished counts per kind over `window`, and the same counted in `jobs`.
    func statsCounts(_ q: TestQueue, window: Duration) async throws -> (counted: [String: [Int]], actual: [String: [Int]]) {
        var counted: [String: [Int]] = [:]
        for kind in try await q.driver.jobStats(window: window) where kind.completed + kind.dead + kind.cancelled > 0 {
            counted[kind.kind.rawValue] = [kind.completed, kind.dead, kind.cancelled, kind.dependencyFailed]
        }
        var actual: [String: [Int]] = [:]
        for row in try await q.sql.query("""
            SELECT kind, count(*) FILTER (WHERE state = 'completed') AS completed, count(*) FILTER (WHERE state = 'dead') AS dead,
                   count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
                   count(*) FILTER (WHERE state = 'cancelled' AND last_error_code = 'DEPENDENCY_FAILED') AS dependency_failed
            FROM jobs WHERE finished_at > now() - make_interval(secs => $1) AND state IN ('completed', 'dead', 'cancelled') GROUP BY kind
            """, [window.seconds]).rows {
            actual[try row.string("kind")] = [try row.int("completed"), try row.int("dead"), try row.int("cancelled"), try row.int("dependency_failed")]
        }
        return (counted, actual)
    }

    func expectExact(_ q: TestQueue, _ step: String, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let minutes = try await minuteCounts(q)
        #expect(minutes.counted == minutes.actual, "per minute, after \(step)", sourceLocation: sourceLocation)
        let dead = try await deadCounts(q)
        #expect(dead.counted == dead.actual, "dead groups, after \(step)", sourceLocation: sourceLocation)
        for window in [Duration.seconds(90), .seconds(3 * 3_600), .seconds(30 * 86_400)] {
            let stats = try await statsCounts(q, window: window)
            #expect(stats.counted == stats.actual, "stats over \(window), after \(step)", sourceLocation: sourceLocation)
        }
    }

    /// Claims up to `count` jobs of `kind` and ends each with the next of `outcomes`, in turn.
    func end(_ q: TestQueue, _ kind: JobKind, _ count: Int, _ outcomes: [JobOutcome.Kind]) async throws {
        let jobs = try await q.driver.jobClaim(ClaimRequest(owner: owner, lease: .seconds(30), slots: [kind: count])).jobs
        let ended = jobs.enumerated().map { index, job in JobOutcome(jobID: job.id, attempt: job.attempt, kind: outcomes[index % outcomes.count]) }
        _ = try await q.driver.jobFinishMany(owner: owner, outcomes: ended)
    }

    @Test func theCountsEqualACountOfTheJobsAfterEveryWayAJobEndsOrLeaves() async throws {
        let q = try await TestQueue.make()
        let control = JobControl(driver: q.driver)
        _ = try await q.queue.enqueue(Array(repeating: NewJob(kind: .drillNoop, maxAttempts: 2), count: 60)
                                      + Array(repeating: NewJob(kind: .drillScript), count: 40))
        try await expectExact(q, "enqueue")
        try await end(q, .drillNoop, 60, [
            .completed(result: nil), .dead(error: "x", code: JobErrorCode(rawValue: "PROVIDER_DOWN")), .dead(error: "y", code: nil),
            .retry(error: "z", code: JobErrorCode(rawValue: "IMAGE_INVALID"), retryIn: .zero), .cancelled,
        ])
        try await end(q, .drillScript, 40, [.completed(result: "{}"), .dead(error: "x", code: JobErrorCode(rawValue: "IMAGE_INVALID"))])
        try await expectExact(q, "mixed endings")
        #expect(try await q.driver.jobFoldCounts() > 0)
        try await expectExact(q, "a fold")

        // The retried ones end again (their second and last attempt), some by a lease rescue.
        try await end(q, .drillNoop, 6, [.completed(result: nil), .dead(error: "again", code: JobErrorCode(rawValue: "PROVIDER_DOWN"))])
        _ = try await q.driver.jobClaim(ClaimRequest(owner: owner, lease: .milliseconds(1), slots: [.drillNoop: 6]))
        try await Task.sleep(for: .milliseconds(20))
        #expect(try await q.driver.jobRescueExpired(limit: 100).count == 6)
        try await expectExact(q, "second attempts and lease rescues")

        // Finished rows written as they are: an hour, two days and nine days ago.
        try await q.sql.query("""
            INSERT INTO jobs (kind, state, attempt, finished_at, last_error_code)
            SELECT (ARRAY['drill.noop', 'image.normalize'])[1 + i % 2], (ARRAY['completed', 'dead', 'cancelled'])[1 + i % 3]::job_state, 1,
                   now() - (ARRAY[interval '1 hour', interval '2 days', interval '9 days'])[1 + i % 3] - make_interval(secs => i),
                   CASE WHEN i % 3 <> 0 THEN (ARRAY['PROVIDER_DOWN', 'DEPENDENCY_FAILED'])[1 + i % 2] END
            FROM generate_series(1, 300) AS i
            """)
        try await expectExact(q, "finished rows inserted")

        // Operators: a bulk retry, a single retry, a bulk discard, a single discard, a plain DELETE.
        #expect(try await control.retryMany(JobFilter(states: [.dead], errorCode: "PROVIDER_DOWN"), limit: 5, dryRun: false, actor: "t").retried == 5)
        let someDead = try await q.sql.query("SELECT id FROM jobs WHERE state = 'dead' AND last_error_code IS NULL LIMIT 1").rows[0].int64("id")
        #expect(try await control.retry(id: someDead, runAt: nil, actor: "t") == .retried)
        #expect(try await control.discardMany(JobFilter(states: [.completed, .cancelled]), limit: 30, dryRun: false, actor: "t") == 30)
        let anotherDead = try await q.sql.query("SELECT id FROM jobs WHERE state = 'dead' LIMIT 1").rows[0].int64("id")
        #expect(try await control.discard(id: anotherDead, actor: "t") == .discarded)
        try await q.sql.query("DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE state = 'dead' ORDER BY id DESC LIMIT 7)")
        try await expectExact(q, "retries, discards and a delete")
        _ = try await q.driver.jobFoldCounts()
        try await expectExact(q, "a second fold")

        // The retried jobs end again; an unknown kind is swept dead; the prune deletes the old rows.
        try await end(q, .drillNoop, 10, [.dead(error: "third", code: JobErrorCode(rawValue: "LEASE_EXPIRED")), .completed(result: nil)])
        try await q.sql.query("INSERT INTO jobs (kind, created_at) VALUES ('no.such.kind', now() - interval '1 hour')")
        #expect(try await q.driver.jobKillUnknownKinds(known: FleetKinds.all.kinds, grace: .seconds(60)).count == 1)
        #expect(try await q.driver.jobDeleteFinished(Retention(), limit: 1_000, from: nil).deleted > 0)
        try await expectExact(q, "more endings, a sweep and a prune")
        _ = try await q.driver.jobFoldCounts()
        #expect(try await q.driver.jobCountsDropEmpty() > 0, "the pruned minutes' counts reached zero")
        try await expectExact(q, "a fold and the empty counts dropped")

        try await q.sql.query("TRUNCATE jobs CASCADE")
        try await expectExact(q, "a truncate")
        #expect(try await q.sql.query("SELECT (SELECT count(*) FROM job_counts) + (SELECT count(*) FROM dead_job_counts) AS n").rows[0].int("n") == 0)
    }

    /// Jobs ending on four connections while folds run beside them: every change counted once.
    @Test func foldsBesideEndingsCountEachChangeOnce() async throws {
        let q = try await TestQueue.make()
        _ = try await q.queue.enqueue(Array(repeating: NewJob(kind: .drillNoop), count: 2_000))
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<4 {
                group.addTask {
                    for _ in 0..<10 {
                        try await end(q, .drillNoop, 50, [.completed(result: nil), .dead(error: "x", code: JobErrorCode(rawValue: "PROVIDER_DOWN"))])
                    }
                }
            }
            for _ in 0..<2 {
                group.addTask { for _ in 0..<20 { _ = try await q.driver.jobFoldCounts() } }
            }
            try await group.waitForAll()
        }
        #expect(try await q.states()[.available] == nil)
        try await expectExact(q, "concurrent endings and folds")
        _ = try await q.driver.jobFoldCounts()
        try await expectExact(q, "the last fold")
        #expect(try await q.sql.query("SELECT count(*) AS n FROM job_count_changes").rows[0].int("n") == 0)
    }

    /// The console's overview counts the last 60 minutes' endings per kind and per minute from
    /// the counts: a job that ended two hours ago is not in them, one a minute ago is.
    @Test func theOverviewCountsTheLastHourExactly() async throws {
        let q = try await TestQueue.make()
        try await q.sql.query("""
            INSERT INTO jobs (kind, state, attempt, finished_at, last_error_code)
            SELECT 'drill.noop', (ARRAY['completed', 'dead'])[1 + i % 2]::job_state, 1,
                   date_trunc('minute', now()) - (ARRAY[interval '0', interval '1 minute', interval '59 minutes', interval '60 minutes',
                                                        interval '2 hours'])[1 + i % 5],
                   CASE WHEN i % 2 = 1 THEN 'PROVIDER_DOWN' END
            FROM generate_series(0, 99) AS i
            """)
        let overview = try await q.driver.queueOverview()
        let noop = try #require(overview.kinds.first { $0.kind == "drill.noop" })
        // Minutes 0, 1 and 59 ago are in; 60 and 120 are not: 60 of the 100 jobs, half of each.
        #expect(noop.completed == 30 && noop.dead == 30, "\(noop)")
        #expect(overview.minutes[59].completed + overview.minutes[59].failed == 20)
        #expect(overview.minutes[58].completed + overview.minutes[58].failed == 20)
        #expect(overview.minutes[0].completed + overview.minutes[0].failed == 20)
    }
}
