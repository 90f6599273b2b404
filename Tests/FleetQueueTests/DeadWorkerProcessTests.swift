import DrillKinds
import FakeProviders
import FleetPostgres
@testable import FleetQueue
import FleetSupport
@testable import FleetTestSupport
import Foundation
@testable import Providers
import Renders
import Testing

/// A lease of an hour for the workers whose death a test times: only the lock, not the lease,
/// can hand their jobs on within the test. How fast the lock does it is printed (the figures in
/// docs/operations.md), not bounded: a bound is a guess at the machine's load.
let leaseOfAnHour = ["FLEET_LEASE_SECONDS": "3600"]

/// Worker processes killed with SIGKILL while the database stays up: found dead by their lock,
/// whatever their lease.
@Suite(.serialized) struct DeadWorkerProcessTests {
    /// With the real dispatcher (its reaper at the default interval).
    @Test func aKilledWorkersJobIsClaimedByAnotherThroughItsLock() async throws {
        let q = try await TestQueue.make()
        let dispatcher = try DispatcherProcess(databaseURL: q.url)
        try await dispatcher.start()
        defer { dispatcher.signal(SIGKILL) }
        let victim = try WorkerProcess(databaseURL: q.url, environment: leaseOfAnHour)
        // 30 s: it outlasts the survivor's start and the kill (a 3 s job ended on the victim
        // first on a loaded machine).
        let job = try await q.queue.enqueue(try NewJob(DrillScript(sleepMs: 30_000)))
        try await q.waitUntil("running on the victim") { try await q.leaseOwnerPID(of: job.id) == victim.pid }
        let survivor = try WorkerProcess(databaseURL: q.url, environment: leaseOfAnHour)
        try await q.waitUntilLocked([victim, survivor])

        let tookOver = try await q.kill(victim, thenTimeUntil: "claimed by the survivor") {
            try await q.leaseOwnerPID(of: job.id) == survivor.pid
        }
        #expect(await victim.wait() != 0)
        try await q.waitUntil(timeout: .seconds(120), "completed") { try await q.queue.job(id: job.id)?.state == .completed }
        let done = try #require(try await q.queue.job(id: job.id))
        #expect(done.attempt == 2 && done.errors.map(\.code) == ["WORKER_LOST"], "\(done)")
        survivor.signal(SIGTERM)
        #expect(await survivor.wait() == 0, "\(survivor.log)")
        print("dead worker: SIGKILL to claimed elsewhere \(tookOver)")
    }

    /// A database restart (immediate, as a crash) ends every session while the workers live on: the reaper (every
    /// 200 ms here) takes nothing back, as the workers' records name the server run before it
    /// until each has locked again; nothing is lost, no job runs past its first attempt.
    @Test func aDatabaseRestartTakesNothingBack() async throws {
        try await PostgresCluster.withPrivate { cluster in
            let q = try await TestQueue.make(cluster: cluster)
            let reaper = RunningReaper(q.driver, interval: .milliseconds(200))
            defer { reaper.stop() }
            let log = temporaryPath("executions")
            let workers = try (0..<2).map { _ in
                try WorkerProcess(databaseURL: q.url, executionLog: log, environment: ["FLEET_CONCURRENCY": "drill.script=16"])
            }
            try await q.waitUntilLocked(workers)
            let total = 400
            _ = try await q.queue.enqueue((0..<total).map { _ in try NewJob(DrillScript(sleepMs: 400)) })
            try await q.waitUntil("a fifth done, both busy") {
                let states = try await q.states()
                return states[.completed, default: 0] > total / 5 && states[.running, default: 0] >= 20
            }
            // Down for a few seconds, as a crashed server is: the workers' notifiers, backing off
            // meanwhile, reconnect up to 2 s after it is back, and the reaper looks every 200 ms
            // in between, finding their locks free.
            try await cluster.stop(.immediate)
            try await Task.sleep(for: .seconds(3))
            try await cluster.start()
            try await q.waitUntil(timeout: .seconds(120), "all completed") {
                (try? await q.pool.withRetry { _ in try await q.states() })?[.completed] == total
            }
            // Both locked again on the new server run.
            try await q.waitUntilLocked(workers)
            for worker in workers { worker.signal(SIGTERM) }
            for worker in workers { #expect(await worker.wait() == 0, "\(worker.log)") }
            let lost = try await q.pool.query("""
                SELECT count(*) AS n FROM jobs WHERE errors @> '[{"code": "WORKER_LOST"}]'
                """).rows[0].int("n")
            #expect(lost == 0, "jobs taken back from live workers")
            #expect(try await q.states() == [.completed: total])
            // A claim the server committed just before it went down, whose answer the worker never
            // read, leaves a job leased to a worker that does not know it: its lease expires and
            // the lease rescue takes it back (`LEASE_EXPIRED`), as designed; nothing else may.
            let rescued = try await q.pool.query("""
                SELECT id, errors::text AS errors FROM jobs WHERE attempt > 1 OR errors <> '[]'
                """).rows
            let byLease = Set(try rescued.filter { ($0["errors"] ?? "").contains("LEASE_EXPIRED") && !($0["errors"] ?? "").contains("WORKER_LOST") }
                .map { try $0.int64("id") })
            #expect(byLease.count == rescued.count, "taken back otherwise than by an expired lease: \(rescued.prefix(3).map { $0["errors"] ?? "" })")
            // Every job ran; each as its first attempt only, unless its lease expired as above.
            // Some ran twice as that first attempt: claims the immediate shutdown lost (a claim's
            // commit does not wait for the disk, docs/queue.md), claimed again after it, the first
            // run's outcome refused. A job taken back from a live worker would have run again as
            // attempt 2 without an expired lease.
            let runs = ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n").map { $0.split(separator: " ") }
            #expect(Set(runs.compactMap { $0.first.flatMap { Int64($0) } }).count == total)
            let pastFirst = runs.filter { $0.count != 2 || $0[1] != "1" }.compactMap { $0.first.flatMap { Int64($0) } }
            #expect(Set(pastFirst).isSubset(of: byLease), "a run past the first attempt without an expired lease: \(pastFirst.prefix(5))")
            let twice = ExecutionLog.counts(log).filter { $0.value > 1 }.count
            print("database restart: \(twice) of \(total) jobs ran twice (claims the immediate shutdown lost), \(byLease.count) rescued by their lease")
        }
    }
}

/// Render workers killed mid-render: the provider job resumed elsewhere within the render's
/// deadline, the provider's slots freed by the dead worker's lock.
@Suite(.serialized) struct DeadRenderWorkerTests {
    /// A render worker process of `f`'s, leased for an hour (only its lock hands its jobs on).
    private func renderWorker(_ f: RenderFixture) throws -> WorkerProcess {
        try WorkerProcess(databaseURL: f.q.url, executable: "render-worker", environment: f.workerEnvironment.merging(leaseOfAnHour) { $1 })
    }

    /// r1 completed by the survivor asking fal for the job the victim submitted: one submit, one
    /// charge.
    private func expectTheVictimsSubmissionResumedAndChargedOnce(_ f: RenderFixture, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        #expect(f.fal!.requests.filter { $0.method == "POST" }.count == 1, sourceLocation: sourceLocation)
        #expect(try await f.credits("u1") == (1, 1, 0), sourceLocation: sourceLocation)
        #expect(try await f.ledger("r1") == ["reserve", "consume"], sourceLocation: sourceLocation)
    }

    /// r1 at a fake fal whose jobs take `latency` (deadline 300 s, 1 credit), submitted by
    /// `victim`, a render worker process, while the reaper runs in this process.
    private struct SubmittedRender {
        let f: RenderFixture
        let reaper: RunningReaper
        let victim: WorkerProcess
        let render: RenderRecord
        let jobID: Int64

        static func make(latency: Duration, worker: (RenderFixture) throws -> WorkerProcess) async throws -> SubmittedRender {
            let f = try await RenderFixture.atFal(latency: latency, deadline: .seconds(300), credits: 1)
            let reaper = RunningReaper(f.q.driver)
            let victim = try worker(f)
            do {
                let render = try await f.request("r1")
                let jobID = try #require(render.jobID)
                try await f.q.waitUntil("submitted to fal") { try await f.reload(render).providerJobID != nil }
                return SubmittedRender(f: f, reaper: reaper, victim: victim, render: render, jobID: jobID)
            } catch {
                stop(f, reaper, victim)
                throw error
            }
        }

        func stop() { Self.stop(f, reaper, victim) }

        private static func stop(_ f: RenderFixture, _ reaper: RunningReaper, _ victim: WorkerProcess) {
            victim.signal(SIGKILL)
            reaper.stop()
            let fal = f.fal!
            Task { await fal.stop() }
        }
    }

    @Test func aRenderOnAKilledWorkerResumesItsProviderJobElsewhereWithinItsDeadline() async throws {
        // The fal job outlasts the survivor's start and the kill (30 s: a 5 s job ended on the
        // victim before the kill on a loaded machine), the deadline the takeover and the rest.
        let submitted = try await SubmittedRender.make(latency: .seconds(30), worker: renderWorker)
        defer { submitted.stop() }
        let (f, victim, render, jobID) = (submitted.f, submitted.victim, submitted.render, submitted.jobID)
        let survivor = try renderWorker(f)
        defer { survivor.signal(SIGKILL) }
        try await f.q.waitUntilLocked([victim, survivor])
        #expect(try await f.q.leaseOwnerPID(of: jobID) == victim.pid)

        let killed = ContinuousClock.now
        let tookOver = try await f.q.kill(victim, thenTimeUntil: "claimed by the survivor") {
            try await f.q.leaseOwnerPID(of: jobID) == survivor.pid
        }
        try await f.q.waitUntil(timeout: .seconds(300), "render ended") { try await f.reload(render).status.isTerminal }
        let ended = ContinuousClock.now - killed
        let done = try await f.reload(render)
        #expect(done.status == .complete, "\(done)")
        #expect(Date() < done.deadlineAt, "completed within its deadline")
        try await expectTheVictimsSubmissionResumedAndChargedOnce(f)
        // The job ended in the commit that completed the render.
        let job = try #require(try await f.q.queue.job(id: jobID))
        #expect(job.state == .completed && job.attempt == 2 && job.errors.map(\.code) == ["WORKER_LOST"], "\(job)")
        survivor.signal(SIGTERM)
        #expect(await survivor.wait() == 0, "\(survivor.log)")
        print("dead render worker: SIGKILL to claimed elsewhere \(tookOver), to the render complete \(ended)")
    }

    /// A worker killed between the provider's answer and the commit that settles the render (held
    /// there by a lock the test takes on the job's row, which that transaction writes last, after
    /// the render and its credit): nothing of the settlement commits, so the render stays open, and
    /// the worker that takes the job over resumes the same provider job and charges the credit once.
    @Test func aKillBeforeTheSettlingCommitLeavesTheRenderToResumeAndChargeOnce() async throws {
        // Long enough for the job's row to be held before the provider answers (10 s).
        let submitted = try await SubmittedRender.make(latency: .seconds(10), worker: renderWorker)
        defer { submitted.stop() }
        let (f, victim, render, jobID) = (submitted.f, submitted.victim, submitted.render, submitted.jobID)
        let holder = try await PostgresConnection.connect(f.q.url)
        try await holder.query("BEGIN")
        _ = try await holder.query("SELECT id FROM jobs WHERE id = $1 FOR UPDATE", [jobID])
        let holderPID = try await holder.query("SELECT pg_backend_pid() AS pid").rows[0].int("pid")
        try await f.q.waitUntil(timeout: .seconds(120), "the victim settling the render, held by its job's row") {
            try await f.q.pool.query(
                "SELECT count(*) AS n FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))", [holderPID]
            ).rows[0].int("n") == 1
        }
        let survivor = try renderWorker(f)
        defer { survivor.signal(SIGKILL) }
        try await f.q.waitUntilLocked([survivor])
        victim.signal(SIGKILL)
        // Nothing of the settlement is visible: the render is open and its credit reserved.
        #expect(try await f.reload(render).status == .processing)
        #expect(try await f.credits("u1") == (1, 0, 1))
        // Released, the victim's transaction finds its client gone and rolls back.
        try await holder.query("ROLLBACK")
        try await f.q.waitUntil(timeout: .seconds(300), "the job ended") { try await f.q.queue.job(id: jobID)?.state.isTerminal == true }
        let done = try await f.reload(render)
        #expect(done.status == .complete, "\(done)")
        try await expectTheVictimsSubmissionResumedAndChargedOnce(f)
        let job = try #require(try await f.q.queue.job(id: jobID))
        #expect(job.state == .completed && job.attempt == 2 && job.errors.map(\.code) == ["WORKER_LOST"], "\(job)")
        survivor.signal(SIGTERM)
        #expect(await survivor.wait() == 0, "\(survivor.log)")
    }

    /// The provider's limit (2 here) counts running renders: those of a dead worker stop counting
    /// as soon as the reaper takes them back, and the render that waited for a slot starts.
    @Test func aDeadWorkersRendersFreeTheProvidersSlotsThroughItsLock() async throws {
        let f = try await RenderFixture.atFal(latency: .seconds(20), credits: 3)
        let fal = f.fal!
        defer { Task { await fal.stop() } }
        try await f.q.driver.limitSet(ConcurrencyLimit(key: RenderCapacity.providerKey(FashnProvider.name), maxRunning: 2), by: "test")
        let reaper = RunningReaper(f.q.driver)
        defer { reaper.stop() }
        let victim = try renderWorker(f)
        defer { victim.signal(SIGKILL) }
        let first = [try await f.request("r1"), try await f.request("r2")]
        try await f.q.waitUntil("both submitted") {
            for render in first where try await f.reload(render).providerJobID == nil { return false }
            return true
        }
        let waiting = try await f.request("r3")
        let waitingJob = try #require(waiting.jobID)
        let survivor = try renderWorker(f)
        defer { survivor.signal(SIGKILL) }
        try await f.q.waitUntilLocked([victim, survivor])
        // Not claimed while both slots are taken: a window, unavoidable for a "not", opened once
        // both workers have locked (and so poll), a few of their 200 ms polls long.
        try await Task.sleep(for: .milliseconds(500))
        #expect(try await f.q.queue.job(id: waitingJob)?.state == .available, "held back by the limit")

        func survivorRuns() async throws -> [Int64] {
            try await f.q.pool.query("SELECT id, lease_owner FROM jobs WHERE kind = 'render.run' AND state = 'running'").rows
                .filter { TestQueue.pid(ofWorker: try $0.string("lease_owner")) == survivor.pid }.map { try $0.int64("id") }
        }
        let freed = try await f.q.kill(victim, thenTimeUntil: "both slots used by the survivor") { try await survivorRuns().count == 2 }
        // The render that waited for a slot is one of them (the oldest due; the others ran again at the reaper's now).
        #expect(try await survivorRuns().contains(waitingJob))
        let running = try await f.q.pool.query("SELECT count(*) AS n FROM jobs WHERE kind = 'render.run' AND state = 'running'").rows[0].int("n")
        #expect(running == 2, "the limit holds")
        print("dead render worker: SIGKILL to a provider slot used again \(freed)")
    }
}
