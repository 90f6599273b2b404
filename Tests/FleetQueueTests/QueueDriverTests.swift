@testable import DispatcherCore
import FleetPostgres
@testable import FleetQueue
@testable import FleetSupport
@testable import FleetTestSupport
import Foundation
import Testing

/// The driver's contract, statement by statement, against a real PostgreSQL: each test on a pool
/// and inside a caller's open transaction (`DriverExecutor`), but for the few that say why not.
@Suite struct QueueDriverTests {
    let owner = "test-worker"

    func claim(_ q: TestQueue, _ slots: [JobKind: Int], owner: String? = nil, lease: Duration = .seconds(30)) async throws -> [ClaimedJob] {
        try await q.driver.jobClaim(ClaimRequest(owner: owner ?? self.owner, lease: lease, slots: slots)).jobs
    }

    /// The copy of the newest error's code every statement that appends an error keeps beside it.
    func lastErrorCode(_ q: TestQueue, _ id: Int64) async throws -> String? {
        try await q.sql.query("SELECT last_error_code FROM jobs WHERE id = $1", [id]).rows[0]["last_error_code"]
    }

    @Test(arguments: DriverExecutor.allCases) func claimsInPriorityThenRunAtOrder(_ executor: DriverExecutor) async throws {
        let q = try await TestQueue.make(executor: executor)
        let low = try await q.queue.enqueue(NewJob(kind: .drillNoop, priority: 5))
        let high = try await q.queue.enqueue(NewJob(kind: .drillNoop, priority: 0))
        let mid = try await q.queue.enqueue(NewJob(kind: .drillNoop, priority: 2))
        let claimed = try await claim(q, [.drillNoop: 10])
        #expect(claimed.map(\.id) == [high.id, mid.id, low.id])
        #expect(claimed.allSatisfy { $0.attempt == 1 })
    }

    /// The claim walks its indexes, not the table, once `ANALYZE` has seen a table whose jobs are
    /// all in one queue: the due jobs by `jobs_claim_idx` (with the pause test written as
    /// `queue <> ALL (paused.queues)`, estimated at 0 rows, PostgreSQL read and sorted the whole
    /// table), the claimed rows by the primary key (joined to the picked ids, it hashed a scan of
    /// the whole table). docs/queue.md.
    @Test(arguments: [false, true]) func theClaimWalksItsIndexOnAnAnalysedTableOfOneQueue(guarded: Bool) async throws {
        let q = try await TestQueue.make()
        _ = try await q.queue.enqueue((0..<5_000).map { _ in NewJob(kind: .drillNoop) })
        try await q.sql.query("ANALYZE jobs")
        let plan = try await q.sql.query("EXPLAIN " + PostgresQueueDriver.claimSQL(guarded: guarded, noFlushWait: true), [
            PostgresArray(["drill.noop"]), PostgresArray([1_000]), owner, 30.0, nil,
            PostgresArray([ClaimFrontier.Seek.start.priority]), PostgresArray([ClaimFrontier.Seek.start.runAt]),
        ]).rows.map { try $0.string("QUERY PLAN") }.joined(separator: "\n")
        #expect(plan.contains("Index Scan using jobs_claim_idx"), "\(plan)")
        #expect(plan.contains("Index Scan using jobs_pkey"), "\(plan)")
        #expect(!plan.contains("Seq Scan on jobs"), "\(plan)")
    }

    /// A generic plan made while the table was empty (the worker's first claims after an
    /// emptied, analysed table) expects a few rows and reads `jobs` by seq scans. Each row must
    /// then cost little: the claimed rows are matched by a join, not by `id = ANY (ids)`, which
    /// searched the whole array once per row (1,000 ids against 2,000 rows: 16 ms instead of 9),
    /// and the scan checks the state before the pause test, which builds an array per row
    /// (0.07 ms per claim on 300 finished jobs).
    @Test(arguments: [false, true]) func aClaimPlannedOnAnEmptyTableReadsEachRowCheaply(guarded: Bool) async throws {
        let q = try await TestQueue.make(executor: .transaction)
        try await q.sql.query("ANALYZE jobs")
        try await q.sql.query("SET LOCAL plan_cache_mode = force_generic_plan")
        try await q.sql.query("PREPARE claim_on_empty AS " + PostgresQueueDriver.claimSQL(guarded: guarded, noFlushWait: false))
        let execute = "EXECUTE claim_on_empty('{drill.noop}', '{1000}', '\(owner)', 30, NULL, '{-1}', '{-inf}')"
        #expect(try await q.sql.query(execute).rows.isEmpty)
        _ = try await q.queue.enqueue((0..<2_000).map { _ in NewJob(kind: .drillNoop) })
        let plan = try await q.sql.query("EXPLAIN " + execute).rows.map { try $0.string("QUERY PLAN") }.joined(separator: "\n")
        #expect(plan.contains("Seq Scan on jobs"), "the plan is the one made on the empty table: \(plan)")
        #expect(!plan.contains("id = ANY"), "\(plan)")
        let scanFilter = plan.split(separator: "\n").first { $0.contains("Filter:") && $0.contains("paused.queues") }
        #expect(scanFilter?.contains("Filter: ((state = 'available'") == true, "\(plan)")
        #expect(try await q.sql.query(execute).rows.count == 1_000)
    }

    /// The hot statements settle on PostgreSQL's generic plan, made once per connection: the
    /// claim and the batched finish (while the planner could see their arrays' lengths, one job or
    /// outcome made a custom plan look cheaper, and each call was planned anew: 0.4 and 0.3 ms of
    /// every render), a handler's end of its own job (`jobEnd`, a render's), and the look for the
    /// jobs making a render's photos (twice a render; planned anew on every call while its matches
    /// were in view), and the kinds' recent run times (render admission's read, up to 100 times a
    /// second; planned anew on every call while its arguments were in view). docs/queue.md,
    /// "Plans". One connection, so that its prepared statements are the ones counted.
    @Test func theHotStatementsAreNotPlannedAnewOnEveryCall() async throws {
        let q = try await TestQueue.make(executor: .transaction)
        _ = try await q.queue.enqueue((0..<24).map { _ in NewJob(kind: .drillNoop, limitKeys: ["k"]) })
        let matches = [try JobMatch(kind: .drillNoop, payloadContains: ["n": 1]), try JobMatch(kind: .drillScript, payloadContains: ["n": 2])]
        for _ in 0..<12 {
            let jobs = try await claim(q, [.drillNoop: 2])
            try #require(jobs.count == 2)
            _ = try await q.driver.jobFinishMany(owner: owner, outcomes: [
                JobOutcome(jobID: jobs[0].id, attempt: jobs[0].attempt, kind: .completed(result: nil))])
            #expect(try await q.driver.jobEnd(owner: owner, id: jobs[1].id, attempt: jobs[1].attempt, .completed(nil)))
            #expect(try await q.driver.jobPendingMatching(matches, limit: 16).isEmpty)
            #expect(try await q.driver.jobRecentRunTimes(kinds: [.drillNoop, .drillScript], window: .seconds(600), samples: 20).count == 1)
        }
        let plans = try await q.sql.query("""
            SELECT generic_plans, custom_plans FROM pg_prepared_statements
            WHERE statement LIKE '%asked AS MATERIALIZED%' OR statement LIKE '%input AS MATERIALIZED%'
               OR statement LIKE '%WITH ended AS%' OR statement LIKE '%payload @> wanted.contains%'
               OR statement LIKE '%sampled AS MATERIALIZED%'
            """).rows
        #expect(plans.count == 5)
        for row in plans {
            #expect(try row.int64("custom_plans") <= 5 && row.int64("generic_plans") >= 7, "\(row)")
        }
    }

    @Test(arguments: DriverExecutor.allCases) func claimTakesNoMoreThanTheFreeSlots(_ executor: DriverExecutor) async throws {
        let q = try await TestQueue.make(executor: executor)
        _ = try await q.queue.enqueue((0..<10).map { _ in NewJob(kind: .drillNoop) })
        _ = try await q.queue.enqueue((0..<10).map { _ in NewJob(kind: .drillScript) })
        let claimed = try await claim(q, [.drillNoop: 3, .drillScript: 2])
        #expect(claimed.filter { $0.kind == .drillNoop }.count == 3)
        #expect(claimed.filter { $0.kind == .drillScript }.count == 2)
    }

    @Test(arguments: DriverExecutor.allCases) func delayedJobWaitsForItsTime(_ executor: DriverExecutor) async throws {
        let q = try await TestQueue.make(executor: executor)
        _ = try await q.queue.enqueue(NewJob(kind: .drillNoop, delay: .seconds(60)))
        #expect(try await claim(q, [.drillNoop: 1]).isEmpty)
        try await q.travelInTime(.seconds(61))
        #expect(try await claim(q, [.drillNoop: 1]).count == 1)
    }

    /// On a pool only: concurrency is the point: one connection runs its statements one at a time.
    @Test func concurrentClaimsNeverShareAJob() async throws {
        let q = try await TestQueue.make()
        _ = try await q.queue.enqueue((0..<500).map { _ in NewJob(kind: .drillNoop) })
        let batches = try await withThrowingTaskGroup(of: [Int64].self) { group in
            for worker in 0..<8 {
                group.addTask { try await claim(q, [.drillNoop: 100], owner: "w\(worker)").map(\.id) }
            }
            return try await group.reduce(into: [[Int64]]()) { $0.append($1) }
        }
        let all = batches.flatMap { $0 }
        #expect(all.count == 500)
        #expect(Set(all).count == 500)
    }

    @Test(arguments: DriverExecutor.allCases) func idempotencyKeyReturnsTheFirstJob(_ executor: DriverExecutor) async throws {
        let q = try await TestQueue.make(executor: executor)
        let first = try await q.queue.enqueue(NewJob(kind: .drillNoop, idempotencyKey: "render-42"))
        let again = try await q.queue.enqueue(NewJob(kind: .drillNoop, payload: #"{"other":true}"#, idempotencyKey: "render-42"))
        #expect(first.isNew)
        #expect(!again.isNew)
        #expect(again.id == first.id)
        // Within one batch, and mixed with unkeyed jobs, results stay in input order.
        let batch = try await q.queue.enqueue([
            NewJob(kind: .drillNoop), NewJob(kind: .drillNoop, idempotencyKey: "k1"),
            NewJob(kind: .drillNoop, idempotencyKey: "render-42"), NewJob(kind: .drillNoop, idempotencyKey: "k1"),
            NewJob(kind: .drillNoop),
        ])
        #expect(batch.map(\.isNew) == [true, true, false, false, true])
        #expect(batch[2].id == first.id)
        #expect(batch[3].id == batch[1].id)
        #expect(batch[0].id < batch[4].id)
        #expect(try await q.states()[.available] == 4)
    }

    @Test(arguments: DriverExecutor.allCases) func concurrentDuplicatesMakeOneJob(_ executor: DriverExecutor) async throws {
        let q = try await TestQueue.make(executor: executor)
        let ids = try await withThrowingTaskGroup(of: EnqueuedJob.self) { group in
            for _ in 0..<20 {
                group.addTask { try await q.queue.enqueue(NewJob(kind: .drillNoop, idempotencyKey: "same")) }
            }
            return try await group.reduce(into: [EnqueuedJob]()) { $0.append($1) }
        }
        #expect(Set(ids.map(\.id)).count == 1)
        #expect(ids.filter(\.isNew).count == 1)
        #expect(try await q.sql.query("SELECT count(*) AS n FROM jobs").rows[0].int("n") == 1)
    }

    /// On a pool only: a refused statement aborts the caller's transaction, as PostgreSQL does.
    @Test func enqueueRefusesBadJobsWithClearErrors() async throws {
        let q = try await TestQueue.make()
        await #expect(throws: QueueError.unknownKind("image.resize")) { try await q.queue.enqueue(NewJob(kind: "image.resize")) }
        for payload in ["{not json", "[1, 2]", "\"text\"", ""] {
            await #expect {
                try await q.queue.enqueue(NewJob(kind: .drillNoop, payload: payload))
            } throws: { error in
                guard case QueueError.invalidJob(.payload, let reason) = error else { return false }
                return reason.hasPrefix("must be a JSON object")
            }
        }
        await #expect(throws: QueueError.invalidJob(field: .priority, reason: "12 is outside 0...9")) {
            try await q.queue.enqueue(NewJob(kind: .drillNoop, priority: 12))
        }
        // A bad job anywhere in a batch enqueues nothing.
        await #expect(throws: QueueError.self) { try await q.queue.enqueue([NewJob(kind: .drillNoop), NewJob(kind: "nope")]) }
        #expect(try await q.states().isEmpty)
    }

    @Test(arguments: DriverExecutor.allCases) func finishIsACompareAndSetOnOwnerAndAttempt(_ executor: DriverExecutor) async throws {
        let q = try await TestQueue.make(executor: executor)
        let job = try await q.queue.enqueue(NewJob(kind: .drillNoop))
        let claimed = try #require(try await claim(q, [.drillNoop: 1]).first)
        let stranger = try await q.driver.jobFinishMany(owner: "someone-else", outcomes: [
            JobOutcome(jobID: job.id, attempt: 1, kind: .completed(result: nil))])
        let staleAttempt = try await q.driver.jobFinishMany(owner: owner, outcomes: [
            JobOutcome(jobID: job.id, attempt: 7, kind: .completed(result: nil))])
        #expect(stranger.isEmpty && staleAttempt.isEmpty)
        let applied = try await q.driver.jobFinishMany(owner: owner, outcomes: [
            JobOutcome(jobID: claimed.id, attempt: claimed.attempt, kind: .completed(result: #"{"ok":true}"#))])
        #expect(applied == [job.id])
        // A second outcome for the same attempt changes nothing.
        let twice = try await q.driver.jobFinishMany(owner: owner, outcomes: [
            JobOutcome(jobID: claimed.id, attempt: claimed.attempt, kind: .dead(error: "late", code: nil))])
        #expect(twice.isEmpty)
        let record = try #require(try await q.queue.job(id: job.id))
        #expect(record.state == .completed)
        #expect(record.result == #"{"ok": true}"#)
        #expect(record.finishedAt != nil && record.leaseOwner == nil)
    }

    /// The end a handler writes for its own job: the same compare-and-set as the batch's, and the
    /// same row: completed with its result, or dead with its error kept among the attempt's.
    @Test(arguments: DriverExecutor.allCases) func aHandlersEndIsACompareAndSetOnOwnerAndAttempt(_ executor: DriverExecutor) async throws {
        let q = try await TestQueue.make(executor: executor)
        let done = try await q.queue.enqueue(NewJob(kind: .drillNoop))
        let failed = try await q.queue.enqueue(NewJob(kind: .drillNoop))
        let claimed = try await claim(q, [.drillNoop: 2])
        let first = try #require(claimed.first { $0.id == done.id })
        let second = try #require(claimed.first { $0.id == failed.id })
        #expect(try await !q.driver.jobEnd(owner: "someone-else", id: first.id, attempt: first.attempt, .completed(nil)))
        #expect(try await !q.driver.jobEnd(owner: owner, id: first.id, attempt: 7, .completed(nil)))
        #expect(try await q.driver.jobEnd(owner: owner, id: first.id, attempt: first.attempt, .completed(.object(["ok": .bool(true)]))))
        #expect(try await !q.driver.jobEnd(owner: owner, id: first.id, attempt: first.attempt, .dead(code: JobErrorCode(rawValue: "LATE"), message: "late")))
        let completed = try #require(try await q.queue.job(id: done.id))
        #expect(completed.state == .completed && completed.result == #"{"ok": true}"#)
        #expect(completed.errors.isEmpty && completed.finishedAt != nil && completed.leaseOwner == nil)
        #expect(try await q.driver.jobEnd(owner: owner, id: second.id, attempt: second.attempt, .dead(code: JobErrorCode(rawValue: "E9"), message: "no")))
        let dead = try #require(try await q.queue.job(id: failed.id))
        #expect(dead.state == .dead && dead.result == nil && dead.finishedAt != nil && dead.leaseOwner == nil)
        #expect(dead.errors.map(\.error) == ["no"] && dead.errors.map(\.attempt) == [1])
        #expect(dead.errors[0].code == "E9" && dead.errors[0].worker == owner)
        #expect(try await lastErrorCode(q, failed.id) == "E9")
    }

    @Test(arguments: DriverExecutor.allCases) func retryWaitsThenDeadKeepsEveryError(_ executor: DriverExecutor) async throws {
        let q = try await TestQueue.make(executor: executor)
        let job = try await q.queue.enqueue(NewJob(kind: .drillNoop, maxAttempts: 2))
        let first = try #require(try await claim(q, [.drillNoop: 1]).first)
        _ = try await q.driver.jobFinishMany(owner: owner, outcomes: [
            JobOutcome(jobID: job.id, attempt: first.attempt, kind: .retry(error: "boom 1", code: JobErrorCode(rawValue: "E1"), retryIn: .seconds(60)))])
        var record = try #require(try await q.queue.job(id: job.id))
        #expect(record.state == .available)
        #expect(try await lastErrorCode(q, job.id) == "E1")
        #expect(record.runAt > Date().addingTimeInterval(50))
        #expect(try await claim(q, [.drillNoop: 1]).isEmpty)
        try await q.travelInTime(.seconds(61))
        let second = try #require(try await claim(q, [.drillNoop: 1]).first)
        #expect(second.attempt == 2)
        _ = try await q.driver.jobFinishMany(owner: owner, outcomes: [
            JobOutcome(jobID: job.id, attempt: 2, kind: .dead(error: "boom 2", code: nil))])
        record = try #require(try await q.queue.job(id: job.id))
        #expect(record.state == .dead)
        #expect(record.errors.map(\.error) == ["boom 1", "boom 2"])
        #expect(record.errors.map(\.attempt) == [1, 2])
        #expect(record.errors[0].code == "E1" && record.errors[0].worker == owner)
        #expect(try await lastErrorCode(q, job.id) == nil, "the newest error has no code")
    }

    @Test(arguments: DriverExecutor.allCases) func returnedJobDoesNotSpendAnAttempt(_ executor: DriverExecutor) async throws {
        let q = try await TestQueue.make(executor: executor)
        let job = try await q.queue.enqueue(NewJob(kind: .drillNoop))
        _ = try await claim(q, [.drillNoop: 1])
        _ = try await q.driver.jobFinishMany(owner: owner, outcomes: [JobOutcome(jobID: job.id, attempt: 1, kind: .returned)])
        let record = try #require(try await q.queue.job(id: job.id))
        #expect(record.state == .available && record.attempt == 0 && record.errors.isEmpty)
    }

    /// On a pool only: a notification leaves at commit, and this transaction never commits.
    @Test func cancelQueuedRunningAndFinishedJobs() async throws {
        let q = try await TestQueue.make()
        let queued = try await q.queue.enqueue(NewJob(kind: .drillScript))
        #expect(try await q.queue.cancel(id: queued.id) == .cancelled)
        #expect(try await q.queue.job(id: queued.id)?.state == .cancelled)
        #expect(try await q.queue.cancel(id: queued.id) == .alreadyFinished(.cancelled))
        #expect(try await q.queue.cancel(id: 999_999) == .notFound)

        let listening = TestNotifier(url: q.url)
        defer { listening.stop() }
        var events = listening.events([QueueChannel.control.name])
        #expect(await events.next() == .mightHaveMissed)
        let running = try await q.queue.enqueue(NewJob(kind: .drillScript))
        _ = try await claim(q, [.drillScript: 1])
        #expect(try await q.queue.cancel(id: running.id) == .requested(owner: owner))
        #expect(await events.next() == .notification(
            channel: QueueChannel.control.name, payload: #"{"action":"cancel","jobId":\#(running.id),"owner":"\#(owner)"}"#))
        let renewal = try await q.driver.jobExtendLeases(owner: owner, ids: [running.id], lease: .seconds(30))
        #expect(renewal.kept == [running.id] && renewal.cancelRequested == [running.id])
    }

    @Test(arguments: DriverExecutor.allCases) func leasesRenewOnlyForTheirOwner(_ executor: DriverExecutor) async throws {
        let q = try await TestQueue.make(executor: executor)
        let job = try await q.queue.enqueue(NewJob(kind: .drillNoop))
        _ = try await claim(q, [.drillNoop: 1], lease: .seconds(30))
        let mine = try await q.driver.jobExtendLeases(owner: owner, ids: [job.id], lease: .seconds(120))
        let theirs = try await q.driver.jobExtendLeases(owner: "other", ids: [job.id], lease: .seconds(1))
        #expect(mine.kept == [job.id] && mine.cancelRequested.isEmpty)
        #expect(theirs.kept.isEmpty)
        try await q.travelInTime(.seconds(60))
        #expect(try await q.driver.jobRescueExpired(limit: 10).isEmpty)
    }

    @Test(arguments: DriverExecutor.allCases) func rescuerPutsBackExpiredLeasesAndCountsTheAttempt(_ executor: DriverExecutor) async throws {
        let q = try await TestQueue.make(executor: executor)
        let retryable = try await q.queue.enqueue(NewJob(kind: .drillNoop, maxAttempts: 3))
        let lastChance = try await q.queue.enqueue(NewJob(kind: .drillScript, maxAttempts: 1))
        _ = try await claim(q, [.drillNoop: 1, .drillScript: 1], lease: .seconds(30))
        #expect(try await q.driver.jobRescueExpired(limit: 10).isEmpty)
        try await q.travelInTime(.seconds(31))
        let rescued = try await q.driver.jobRescueExpired(limit: 10)
        #expect(Set(rescued.map(\.state)) == [.available, .dead])
        let again = try #require(try await q.queue.job(id: retryable.id))
        #expect(again.state == .available && again.attempt == 1)
        #expect(again.errors.first?.code == "LEASE_EXPIRED")
        #expect(try await lastErrorCode(q, retryable.id) == "LEASE_EXPIRED")
        #expect(try await lastErrorCode(q, lastChance.id) == "LEASE_EXPIRED")
        #expect(again.errors.first?.error.contains(owner) == true)
        #expect(try await q.queue.job(id: lastChance.id)?.state == .dead)
        // The worker that lost the lease can no longer finish the attempt.
        let late = try await q.driver.jobFinishMany(owner: owner, outcomes: [
            JobOutcome(jobID: retryable.id, attempt: 1, kind: .completed(result: nil))])
        #expect(late.isEmpty)
        #expect(try await claim(q, [.drillNoop: 1]).first?.attempt == 2)
    }

    @Test(arguments: DriverExecutor.allCases) func prunerDeletesOnlyOldFinishedJobs(_ executor: DriverExecutor) async throws {
        let q = try await TestQueue.make(executor: executor)
        let jobs = try await q.queue.enqueue((0..<4).map { _ in NewJob(kind: .drillNoop) })
        _ = try await q.queue.cancel(id: jobs[0].id)
        _ = try await q.queue.cancel(id: jobs[1].id)
        try await q.sql.query("UPDATE jobs SET finished_at = now() - interval '2 days' WHERE id = $1", [jobs[0].id])
        let deleted = try await Pruner(driver: q.driver, logger: testLogger).runOnce()
        #expect(deleted == 1)
        #expect(try await q.queue.job(id: jobs[0].id) == nil)
        #expect(try await q.queue.job(id: jobs[1].id)?.state == .cancelled)
        #expect(try await q.states()[.available] == 2)
    }

    @Test(arguments: DriverExecutor.allCases) func unknownKindEndsDeadWithAClearError(_ executor: DriverExecutor) async throws {
        let q = try await TestQueue.make(executor: executor)
        try await q.sql.query("INSERT INTO jobs (kind, created_at) VALUES ('image.resize', now() - interval '1 hour'), ('image.resize', now())")
        let sweeper = UnknownKindSweeper(driver: q.driver, knownKinds: FleetKinds.all, grace: .seconds(600), logger: testLogger)
        let killed = try await sweeper.runOnce()
        #expect(killed.count == 1)
        let record = try #require(try await q.queue.job(id: killed[0]))
        #expect(record.state == .dead)
        #expect(record.errors.first?.code == "UNKNOWN_KIND")
        #expect(try await lastErrorCode(q, killed[0]) == "UNKNOWN_KIND")
        #expect(record.errors.first?.error == "unknown job kind 'image.resize': no worker of this fleet handles it")
    }

    /// The claim must stay an index scan on the partial index as finished rows pile up.
    @Test(arguments: DriverExecutor.allCases) func claimReadsThePartialIndex(_ executor: DriverExecutor) async throws {
        let q = try await TestQueue.make(executor: executor)
        try await q.sql.query("""
            INSERT INTO jobs (kind, state, finished_at) SELECT 'drill.noop', 'completed', now() FROM generate_series(1, 20000);
            INSERT INTO jobs (kind) SELECT 'drill.noop' FROM generate_series(1, 50);
            ANALYZE jobs;
            """)
        let plan = try await q.sql.query("""
            EXPLAIN SELECT id FROM jobs WHERE state = 'available' AND kind = 'drill.noop' AND run_at <= now()
            ORDER BY priority, run_at, id LIMIT 10 FOR UPDATE SKIP LOCKED
            """).rows.compactMap { $0["QUERY PLAN"] }.joined(separator: "\n")
        #expect(plan.contains("jobs_claim_idx"), "\(plan)")
    }

    /// Outcomes and heartbeats must find their rows by primary key, even when the statistics
    /// still say no job is running (a backlog analysed before the workers started): walking
    /// the running-jobs index once per outcome made a 5,000-outcome batch take seconds.
    @Test(arguments: DriverExecutor.allCases) func finishAndHeartbeatFindRowsByPrimaryKeyWithStaleStatistics(_ executor: DriverExecutor) async throws {
        let q = try await TestQueue.make(executor: executor)
        try await q.sql.withConnection { connection in
            try await connection.query("INSERT INTO jobs (kind) SELECT 'drill.noop' FROM generate_series(1, 20000)")
            try await connection.query("ANALYZE jobs")
            try await connection.query("""
                UPDATE jobs SET state = 'running', lease_owner = 'w', lease_expires_at = now() + interval '1 minute'
                WHERE id % 4 = 0
                """)
            // Custom plans see the arrays' real sizes; generic plans guess. Both must be sound.
            let bigIDs = PostgresArray((1...5000).map { Int64($0 * 4) })
            let finishArrays = [bigIDs, PostgresArray(Array(repeating: 0, count: 5000)), PostgresArray(Array(repeating: "completed", count: 5000)),
                                PostgresArray(Array(repeating: String?.none, count: 5000)), PostgresArray(Array(repeating: String?.none, count: 5000)),
                                PostgresArray(Array(repeating: String?.none, count: 5000)), PostgresArray(Array(repeating: 0.0, count: 5000)),
                                PostgresArray(Array(repeating: false, count: 5000))]
            let customFinish = try await connection.query("EXPLAIN " + PostgresQueueDriver.finishManySQL, ["w"] + finishArrays)
                .rows.compactMap { $0["QUERY PLAN"] }.joined(separator: "\n")
            let customRenew = try await connection.query("EXPLAIN " + PostgresQueueDriver.extendLeasesSQL, ["w", 30.0, bigIDs])
                .rows.compactMap { $0["QUERY PLAN"] }.joined(separator: "\n")
            for plan in [customFinish, customRenew] {
                // No nested loop may repeat a scan of jobs: jobs is reached by key, or hashed once.
                #expect(!plan.contains("jobs_lease_idx"), "\(plan)")
                #expect(plan.contains("jobs_pkey") || plan.contains("Hash Join"), "\(plan)")
                #expect(!(plan.contains("Nested Loop") && plan.contains("Seq Scan on jobs")), "\(plan)")
            }
            try await connection.query("SET plan_cache_mode = force_generic_plan")
            for (name, sql, types) in [
                ("finish", PostgresQueueDriver.finishManySQL, "text, bigint[], integer[], job_state[], jsonb[], text[], text[], float8[], boolean[]"),
                ("renew", PostgresQueueDriver.extendLeasesSQL, "text, float8, bigint[]"),
            ] {
                try await connection.query("PREPARE \(name) (\(types)) AS \(sql)")
            }
            let finishPlan = try await connection.query(
                "EXPLAIN EXECUTE finish ('w', '{4,8}', '{0,0}', '{completed,completed}', '{NULL,NULL}', '{NULL,NULL}', '{NULL,NULL}', '{0,0}', '{f,f}')"
            ).rows.compactMap { $0["QUERY PLAN"] }.joined(separator: "\n")
            let renewPlan = try await connection.query("EXPLAIN EXECUTE renew ('w', 30, '{4,8}')")
                .rows.compactMap { $0["QUERY PLAN"] }.joined(separator: "\n")
            for plan in [finishPlan, renewPlan] {
                #expect(plan.contains("jobs_pkey"), "\(plan)")
                #expect(!plan.contains("jobs_lease_idx") && !(plan.contains("Nested Loop") && plan.contains("Seq Scan on jobs")), "\(plan)")
            }
        }
    }

    /// The transaction executor joins the caller's unit of work: what it enqueues exists for
    /// others only once the caller commits, and is gone if the caller rolls back.
    @Test func jobsEnqueuedInACallersTransactionLiveAndDieWithIt() async throws {
        let q = try await TestQueue.make()
        let outsider = PostgresQueueDriver(executor: q.pool)
        for commit in [false, true] {
            let connection = try await PostgresConnection.connect(q.url)
            try await connection.query("BEGIN")
            let job = try await PostgresQueueDriver(executor: connection).jobInsertMany([NewJob(kind: .drillNoop)])[0]
            #expect(try await outsider.jobGet(id: job.id) == nil, "visible before the commit")
            try await connection.query(commit ? "COMMIT" : "ROLLBACK")
            #expect(try await outsider.jobGet(id: job.id)?.state == (commit ? .available : nil))
        }
    }

    /// The claim turns off the commit's wait for the disk for its own statement only; inside a
    /// caller's transaction that would also cover the caller's writes, so it leaves it alone.
    @Test func aClaimInACallersTransactionLeavesItsDurabilityAlone() async throws {
        let q = try await TestQueue.make(executor: .transaction)
        try await q.sql.query("SET LOCAL synchronous_commit = on")  // the test cluster runs without it
        _ = try await q.queue.enqueue(NewJob(kind: .drillNoop))
        #expect(try await claim(q, [.drillNoop: 1]).count == 1)
        #expect(try await q.sql.query("SHOW synchronous_commit").rows[0]["synchronous_commit"] == "on")
    }

    /// `jobs.list` pages of finished jobs read the partial indexes of finished jobs in id order: by
    /// state, by state and kind (a kind alone: each finished state's branch by state and kind), dead
    /// ones by code; never a scan of the whole table, nor a walk down the primary key filtering
    /// rows (which a page of a kind would take, the kind being a third of the table, however many
    /// newer jobs of other kinds it would step through). `fleet-bench ops` and `large` measure
    /// the pages on 1,000,000 and 10,000,000 jobs.
    @Test func listPagesReadAnIndexInIdOrder() async throws {
        let q = try await TestQueue.make()
        try await q.sql.query("""
            INSERT INTO jobs (kind, state, attempt, finished_at, errors, last_error_code)
            SELECT (ARRAY['drill.noop', 'drill.script', 'image.normalize'])[1 + i % 3],
                CASE WHEN i % 500 = 0 THEN 'dead'::job_state WHEN i % 500 = 1 THEN 'cancelled'::job_state ELSE 'completed'::job_state END,
                1, now(),
                CASE WHEN i % 500 = 0 THEN jsonb_build_array(jsonb_build_object('code', c.code)) ELSE '[]' END,
                CASE WHEN i % 500 = 0 THEN c.code END
            FROM generate_series(1, 100000) AS i, LATERAL (SELECT (ARRAY['A', 'B', 'C', 'D'])[1 + i % 4] AS code) AS c
            """)
        try await q.sql.query("VACUUM ANALYZE jobs")
        // Dead jobs are few here (one in 500): the planner may as well read all of them from
        // `jobs_dead_groups_idx`, another index of dead jobs only, and sort them.
        let deadIndexes = ["jobs_dead_groups_idx"]
        for (filter, indexes) in [
            (JobFilter(states: [.dead]), ["jobs_finished_state_idx"] + deadIndexes),
            (JobFilter(states: [.cancelled]), ["jobs_finished_state_idx"]),
            (JobFilter(states: [.completed]), ["jobs_finished_state_idx"]),
            (JobFilter(states: [.dead], kinds: ["drill.script"]), ["jobs_finished_kind_idx"] + deadIndexes),
            (JobFilter(states: [.completed], kinds: ["drill.script"]), ["jobs_finished_kind_idx"]),
            (JobFilter(kinds: ["drill.script"]), ["jobs_finished_kind_idx"]),
            (JobFilter(states: [.dead], errorCode: "B"), ["jobs_dead_code_idx"] + deadIndexes),
            // A bulk retry's filter (dead or cancelled): any of them.
            (JobFilter(states: [.dead, .cancelled], kinds: ["drill.script"], errorCode: "B"), ["jobs_"]),
        ] {
            for before in [nil, Int64(50000)] {
                let (sql, parameters) = PostgresQueueDriver.listStatement(filter, before: before, limit: 50)
                let plan = try await q.sql.query("EXPLAIN " + sql, parameters, planning: .eachCall)
                    .rows.compactMap { $0["QUERY PLAN"] }.joined(separator: "\n")
                #expect(indexes.contains { plan.contains($0) }, "\(filter): \(plan)")
                #expect(!plan.contains("Seq Scan"), "\(filter): \(plan)")
                #expect(!plan.contains("Scan Backward using jobs_pkey"), "\(filter): \(plan)")
            }
        }
    }

    /// `JobDeferral.runAfter`: the running job waits for the jobs named (those not ended), its
    /// attempt refunded, and is released by the last one's completion; once they have all ended,
    /// it is available at once. Only its holder may defer it.
    @Test func aDeferredJobWaitsForTheJobsItNamesWithItsAttemptUnspent() async throws {
        let q = try await TestQueue.make()
        let maker = try await q.queue.enqueue(NewJob(kind: .drillNoop, priority: 5))
        let done = try await q.queue.enqueue(NewJob(kind: .drillNoop, priority: 5))
        let job = try await q.queue.enqueue(NewJob(kind: .drillScript, priority: 0))
        let claimed = try #require(try await claim(q, [.drillScript: 1]).first)
        #expect(try await claim(q, [.drillNoop: 2]).map(\.id).sorted() == [maker.id, done.id])
        _ = try await q.driver.jobFinishMany(owner: owner, outcomes: [JobOutcome(jobID: done.id, attempt: 1, kind: .completed(result: nil))])

        #expect(try await !q.driver.jobRunAfter(id: job.id, attempt: claimed.attempt, owner: "someone-else", jobs: [maker.id]))
        #expect(try await q.driver.jobRunAfter(id: job.id, attempt: claimed.attempt, owner: owner, jobs: [maker.id, done.id]))
        var record = try #require(try await q.queue.job(id: job.id))
        #expect(record.state == .waiting && record.attempt == 0 && record.leaseOwner == nil && record.errors.isEmpty)
        #expect(record.dependsOn == [maker.id, done.id] && record.waitingOn == [maker.id])

        _ = try await q.driver.jobFinishMany(owner: owner, outcomes: [JobOutcome(jobID: maker.id, attempt: 1, kind: .completed(result: nil))])
        record = try #require(try await q.queue.job(id: job.id))
        #expect(record.state == .available && record.attempt == 0)

        // Deferred after jobs that all ended already: available at once, claimed at attempt 1 again.
        let again = try #require(try await claim(q, [.drillScript: 1]).first)
        #expect(again.attempt == 1)
        #expect(try await q.driver.jobRunAfter(id: job.id, attempt: again.attempt, owner: owner, jobs: [maker.id]))
        record = try #require(try await q.queue.job(id: job.id))
        #expect(record.state == .available && record.attempt == 0)
    }

    /// `JobDeferral.retryIn`: available again after the delay, the attempt refunded, the error and
    /// its code kept.
    @Test func aJobDeferredForADelayKeepsItsErrorAndItsAttempt() async throws {
        let q = try await TestQueue.make()
        let job = try await q.queue.enqueue(NewJob(kind: .drillScript))
        let claimed = try #require(try await claim(q, [.drillScript: 1]).first)
        let deferred = JobOutcome.Kind.deferred(error: "cannot write x: No space left on device", code: JobErrorCode(rawValue: "STORAGE_FULL"), retryIn: .seconds(60))
        #expect(try await q.driver.jobFinishMany(owner: owner, outcomes: [JobOutcome(jobID: job.id, attempt: claimed.attempt, kind: deferred)]) == [job.id])
        let record = try #require(try await q.queue.job(id: job.id))
        #expect(record.state == .available && record.attempt == 0 && record.runAt > Date().addingTimeInterval(50))
        #expect(record.errors.map(\.code) == ["STORAGE_FULL"] && record.errors.first?.attempt == 1)
        #expect(try await lastErrorCode(q, job.id) == "STORAGE_FULL")
    }
}
