import FleetPostgres
@testable import FleetQueue
@testable import FleetTestSupport
import Foundation
import Testing

/// Fleet-wide limits in the claim (`docs/queue.md`, "Limits"), against a real PostgreSQL: each
/// contract test on a pool and inside a caller's open transaction, like the driver's suite.
@Suite struct ConcurrencyLimitTests {
    func claim(_ q: TestQueue, _ slots: Int, owner: String = "w1", lease: Duration = .seconds(30)) async throws -> ClaimResult {
        try await q.driver.jobClaim(ClaimRequest(owner: owner, lease: lease, slots: [.drillNoop: slots], limitedKinds: [.drillNoop]))
    }

    func enqueue(_ q: TestQueue, _ count: Int, keys: [String]) async throws -> [Int64] {
        try await q.queue.enqueue((0..<count).map { _ in NewJob(kind: .drillNoop, limitKeys: keys) }).map(\.id)
    }

    func complete(_ q: TestQueue, _ jobs: [ClaimedJob], owner: String = "w1") async throws {
        _ = try await q.driver.jobFinishMany(owner: owner, outcomes: jobs.map {
            JobOutcome(jobID: $0.id, attempt: $0.attempt, kind: .completed(result: nil))
        })
    }

    @Test(arguments: DriverExecutor.allCases) func maxRunningHoldsAcrossClaimersUntilASlotFrees(_ executor: DriverExecutor) async throws {
        let q = try await TestQueue.make(executor: executor)
        try await q.driver.limitSet(ConcurrencyLimit(key: "provider:p", maxRunning: 3), by: "test")
        _ = try await enqueue(q, 10, keys: ["provider:p"])
        let first = try await claim(q, 10, owner: "w1")
        #expect(first.jobs.count == 3 && first.heldBack == [.drillNoop])
        let second = try await claim(q, 10, owner: "w2")
        #expect(second.jobs.isEmpty && second.heldBack == [.drillNoop])
        try await complete(q, Array(first.jobs.prefix(1)))
        #expect(try await claim(q, 10, owner: "w2").jobs.count == 1)
        // Jobs without keys, or with keys no rule names, are not held back.
        _ = try await enqueue(q, 2, keys: [])
        _ = try await enqueue(q, 2, keys: ["provider:other"])
        #expect(try await claim(q, 10, owner: "w3").jobs.count == 4)
    }

    @Test(arguments: DriverExecutor.allCases) func aPrefixRuleLimitsEachKeyAloneAndHidesNoOneElse(_ executor: DriverExecutor) async throws {
        let q = try await TestQueue.make(executor: executor)
        try await q.driver.limitSet(ConcurrencyLimit(key: "user:*", maxRunning: 2), by: "test")
        try await q.driver.limitSet(ConcurrencyLimit(key: "provider:p", maxRunning: 10), by: "test")
        _ = try await enqueue(q, 50, keys: ["provider:p", "user:u1"])
        let busy = try await claim(q, 10)
        #expect(busy.jobs.count == 2, "u1 takes two slots, no more")
        // u2 enqueued behind 48 of u1's jobs starts at the next claim.
        let late = try await enqueue(q, 1, keys: ["provider:p", "user:u2"])
        let next = try await claim(q, 10, owner: "w2")
        #expect(next.jobs.map(\.id) == late)
        let usage = try await q.driver.limitUsage()
        #expect(usage.first { $0.key == "user:u1" }?.running == 2)
        #expect(usage.first { $0.key == "provider:p" } == LimitUsage(rule: "provider:p", key: "provider:p", running: 3, startedInWindow: 3, waiting: 48))
    }

    @Test(arguments: DriverExecutor.allCases) func aRateCountsStartsInASlidingWindow(_ executor: DriverExecutor) async throws {
        let q = try await TestQueue.make(executor: executor)
        try await q.driver.limitSet(ConcurrencyLimit(key: "provider:p", rate: 4, rateWindow: .seconds(60)), by: "test")
        _ = try await enqueue(q, 10, keys: ["provider:p"])
        let first = try await claim(q, 3)
        #expect(first.jobs.count == 3)
        try await complete(q, first.jobs)
        let second = try await claim(q, 10)
        #expect(second.jobs.count == 1 && second.heldBack == [.drillNoop], "4 starts within the window, finished or not")
        #expect(try await claim(q, 10).jobs.isEmpty)
        // A minute on, the window has let go of them (aged in the table: now() is fixed inside a
        // caller's transaction, and sleeping through a window is slow and load-sensitive).
        try await q.sql.query("UPDATE limit_starts SET started_at = started_at - interval '61 seconds'")
        #expect(try await claim(q, 10).jobs.count == 4)
    }

    @Test(arguments: DriverExecutor.allCases) func aLoweredLimitAppliesAtTheNextClaim(_ executor: DriverExecutor) async throws {
        let q = try await TestQueue.make(executor: executor)
        try await q.driver.limitSet(ConcurrencyLimit(key: "provider:p", maxRunning: 5), by: "test")
        _ = try await enqueue(q, 10, keys: ["provider:p"])
        #expect(try await claim(q, 2).jobs.count == 2)
        try await q.driver.limitSet(ConcurrencyLimit(key: "provider:p", maxRunning: 2), by: "test")
        #expect(try await claim(q, 10).jobs.isEmpty)
        try await q.driver.limitSet(ConcurrencyLimit(key: "provider:p", maxRunning: 0), by: "test")
        #expect(try await q.driver.limitRemove(key: "provider:p"))
        #expect(try await claim(q, 10).jobs.count == 8, "no rule, no limit")
        #expect(try await q.driver.limitList().isEmpty)
    }

    /// The driver decides: a driver whose last claim found no rule claims by the one statement;
    /// a rule set since still holds at that claim, which says so, and the next claim goes under
    /// the rules' lock.
    @Test(arguments: DriverExecutor.allCases) func aClaimExpectingNoRuleHonoursARuleSetSince(_ executor: DriverExecutor) async throws {
        let q = try await TestQueue.make(executor: executor)
        _ = try await enqueue(q, 10, keys: ["provider:p"])
        let first = try await claim(q, 1)  // a new driver looks under the rules' lock and finds none
        #expect(first.jobs.count == 1 && !first.limitsExist)
        let free = try await claim(q, 1)
        #expect(free.jobs.count == 1 && !free.limitsExist)
        try await q.driver.limitSet(ConcurrencyLimit(key: "provider:p", maxRunning: 3), by: "test")
        let held = try await claim(q, 10)
        #expect(held.jobs.count == 1 && held.limitsExist && held.heldBack == [.drillNoop])
        #expect(try await claim(q, 10).jobs.isEmpty)
        #expect(try await q.driver.limitRemove(key: "provider:p"))
        let unheld = try await claim(q, 10)
        #expect(unheld.jobs.count == 7 && !unheld.limitsExist)
    }

    /// A worker that runs limited and unlimited kinds claims both in one statement while no rule
    /// exists; once a rule appears, that claim still takes the unlimited kind's jobs and holds
    /// the limited kind's to the rule.
    @Test(arguments: DriverExecutor.allCases) func aMixedClaimExpectingNoRuleTakesBothKindsAndHonoursARuleSetSince(
        _ executor: DriverExecutor
    ) async throws {
        let q = try await TestQueue.make(executor: executor)
        _ = try await enqueue(q, 10, keys: ["provider:p"])
        _ = try await q.queue.enqueue((0..<10).map { _ in NewJob(kind: .drillScript) })
        // Each statement's jobs as the driver hands them over, in order.
        func mixedClaim(_ slots: Int) async throws -> (result: ClaimResult, handed: [[JobKind]]) {
            var handed: [[JobKind]] = []
            let result = try await q.driver.jobClaim(ClaimRequest(
                owner: "w1", lease: .seconds(30), slots: [.drillNoop: slots, .drillScript: slots], limitedKinds: [.drillNoop]
            )) { handed.append($0.map(\.kind)) }
            return (result, handed)
        }
        #expect(try await claim(q, 1).jobs.count == 1)  // the driver's first look, under the lock: no rule
        let (free, freeHanded) = try await mixedClaim(2)
        #expect(freeHanded.count == 1, "no rule: one statement claims both kinds")
        #expect(free.jobs.map(\.kind).sorted() == [.drillNoop, .drillNoop, .drillScript, .drillScript] && !free.limitsExist)
        try await q.driver.limitSet(ConcurrencyLimit(key: "provider:p", maxRunning: 4), by: "test")
        let (held, heldHanded) = try await mixedClaim(10)
        // The unlimited kind's jobs handed over first, before the claim under the rules' lock.
        #expect(heldHanded.count == 2 && heldHanded[0].allSatisfy { $0 == .drillScript } && heldHanded[1] == [.drillNoop])
        #expect(held.jobs.filter { $0.kind == .drillScript }.count == 8)
        #expect(held.jobs.filter { $0.kind == .drillNoop }.count == 1)
        #expect(held.limitsExist && held.heldBack == [.drillNoop])
    }

    /// A worker that died holding slots gives them back when the rescuer takes its expired leases.
    @Test(arguments: DriverExecutor.allCases) func slotsComeBackWithTheirLease(_ executor: DriverExecutor) async throws {
        let q = try await TestQueue.make(executor: executor)
        try await q.driver.limitSet(ConcurrencyLimit(key: "provider:p", maxRunning: 2), by: "test")
        _ = try await enqueue(q, 5, keys: ["provider:p"])
        #expect(try await claim(q, 5, owner: "dead", lease: .seconds(1)).jobs.count == 2)
        #expect(try await claim(q, 5).jobs.isEmpty)
        try await q.travelInTime(.seconds(5))
        #expect(try await q.driver.jobRescueExpired(limit: 100).count == 2)
        #expect(try await claim(q, 5).jobs.count == 2)
    }

    @Test func invalidRulesAndKeysAreRefused() async throws {
        let q = try await TestQueue.make()
        await #expect(throws: QueueError.self) { try await q.driver.limitSet(ConcurrencyLimit(key: "a b", maxRunning: 1), by: "t") }
        await #expect(throws: QueueError.self) { try await q.driver.limitSet(ConcurrencyLimit(key: "p"), by: "t") }
        await #expect(throws: QueueError.self) { try await q.driver.limitSet(ConcurrencyLimit(key: "p", maxRunning: -1), by: "t") }
        await #expect(throws: QueueError.invalidJob(field: .limitKeys, reason: "\"a b\" must be 1 to 100 of A-Z a-z 0-9 . _ : -")) {
            _ = try await q.queue.enqueue(NewJob(kind: .drillNoop, limitKeys: ["a b"]))
        }
    }

    /// 60 a minute, for two minutes, three claimers asking every 50 ms: every 60-second window
    /// of the starts PostgreSQL recorded holds at most 60, and each minute gets its 60 (±1).
    @Test func aRateOfSixtyAMinuteHoldsForTwoMinutes() async throws {
        let q = try await TestQueue.make()
        try await q.driver.limitSet(ConcurrencyLimit(key: "provider:p", rate: 60, rateWindow: .seconds(60)), by: "test")
        _ = try await enqueue(q, 400, keys: ["provider:p"])
        let stopAt = ContinuousClock.now + .seconds(121)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<3 {
                group.addTask {
                    while ContinuousClock.now < stopAt {
                        let claimed = try await claim(q, 10, owner: "w\(worker)")
                        try await complete(q, claimed.jobs, owner: "w\(worker)")
                        try await Task.sleep(for: .milliseconds(50))
                    }
                }
            }
            try await group.waitForAll()
        }
        let starts = try await q.sql.query("""
            SELECT extract(epoch FROM started_at - min(started_at) OVER ()) AS at FROM jobs WHERE started_at IS NOT NULL ORDER BY started_at
            """).rows.map { try $0.double("at") }
        var widest = 0
        for (index, start) in starts.enumerated() {
            widest = max(widest, starts[index...].prefix { $0 < start + 60 }.count)
        }
        #expect(widest <= 60, "a 60 s window saw \(widest) starts")
        let firstMinute = starts.count { $0 < 60 }, secondMinute = starts.count { $0 >= 60 && $0 < 120 }
        #expect((59...60).contains(firstMinute) && (59...60).contains(secondMinute), "\(firstMinute) then \(secondMinute)")
    }

    /// Two real worker processes of 50 slots each under a limit of 4: never more than 4 running;
    /// the slots of the one killed with SIGKILL come back with its leases; a limit lowered to 1
    /// holds within a second (once the jobs already running end).
    @Test func workerProcessesHoldTheLimitThroughAKillAndALoweredLimit() async throws {
        let q = try await TestQueue.make()
        try await q.driver.limitSet(ConcurrencyLimit(key: "drill:shared", maxRunning: 4), by: "test")
        let payload = try NewJob(DrillScript(sleepMs: 300)).payload
        let environment = ["FLEET_LEASE_SECONDS": "2", "FLEET_CONCURRENCY": "drill.script=50"]
        let doomed = try WorkerProcess(databaseURL: q.url, environment: environment)
        let survivor = try WorkerProcess(databaseURL: q.url, environment: environment)
        defer { doomed.signal(SIGKILL); survivor.signal(SIGKILL) }
        // Both up before the jobs come: a worker slow to start on a loaded machine found the
        // other had run them all.
        try await q.waitUntilLocked([doomed, survivor])
        _ = try await q.queue.enqueue((0..<60).map { _ in NewJob(kind: .drillScript, payload: payload, limitKeys: ["drill:shared"]) })
        func running() async throws -> (all: Int, doomed: Int) {
            let row = try await q.pool.query("""
                SELECT count(*) AS n, count(*) FILTER (WHERE lease_owner LIKE $1) AS doomed FROM jobs WHERE state = 'running'
                """, ["%:\(doomed.child.pid):%"]).rows[0]
            return (try row.int("n"), try row.int("doomed"))
        }
        var most = 0
        try await q.waitUntil(timeout: .seconds(60), "the doomed worker to hold slots") {
            let now = try await running()
            most = max(most, now.all)
            return now.doomed > 0
        }
        doomed.signal(SIGKILL)
        _ = await doomed.wait()
        let completedAtKill = try await q.states()[.completed] ?? 0
        try await q.waitUntil(timeout: .seconds(60), "the survivor to take the dead worker's jobs back") {
            most = max(most, try await running().all)
            return try await q.states()[.completed] ?? 0 >= completedAtKill + 12
        }
        try await q.driver.limitSet(ConcurrencyLimit(key: "drill:shared", maxRunning: 1), by: "test")
        // Jobs already running finish (300 ms); from then on one at a time.
        try await q.waitUntil("the jobs beyond the new limit finished") { try await running().all <= 1 }
        var afterLowering = 0
        for _ in 0..<40 {
            afterLowering = max(afterLowering, try await running().all)
            try await Task.sleep(for: .milliseconds(25))
        }
        #expect(most == 4, "the limit reached and never passed: \(most)")
        #expect(afterLowering == 1, "\(afterLowering) running a second after the limit went to 1")
        survivor.signal(SIGTERM)
        #expect(await survivor.wait() == 0, "\(survivor.log)")
    }

    /// On a pool only: claimers racing for the last slots, each on its own connection.
    @Test func concurrentClaimersNeverExceedTheLimit() async throws {
        let q = try await TestQueue.make()
        try await q.driver.limitSet(ConcurrencyLimit(key: "provider:p", maxRunning: 10), by: "test")
        _ = try await enqueue(q, 200, keys: ["provider:p"])
        let claimed = try await withThrowingTaskGroup(of: Int.self) { group in
            for worker in 0..<8 {
                group.addTask { try await claim(q, 50, owner: "w\(worker)").jobs.count }
            }
            return try await group.reduce(0, +)
        }
        #expect(claimed == 10)
        #expect(try await q.sql.query("SELECT count(*) AS n FROM jobs WHERE state = 'running'").rows[0].int("n") == 10)
    }
}
