@testable import DispatcherCore
import DrillKinds
import FleetPostgres
@testable import FleetQueue
import FleetSupport
@testable import FleetTestSupport
import Foundation
import Synchronization
import Testing

/// The reaper's statement (`PostgresQueueDriver.workerReapLost`) against a real PostgreSQL: a worker's
/// lock held by a session of its own, as its notifier holds it (`WorkerLock`). On a pool only:
/// the lock lives on sessions, which a caller's open transaction cannot show.
@Suite struct WorkerReaperTests {
    func record(_ id: String) -> WorkerRecord { WorkerRecord(id: id, host: "h", pid: 1, executable: "test", kinds: [.drillNoop]) }

    /// A session that runs `worker`'s session statement, as its notifier does on connecting;
    /// returns the session's backend pid.
    func lockSession(_ q: TestQueue, _ worker: WorkerRecord) async throws -> (PostgresConnection, Int) {
        let connection = try await PostgresConnection.connect(q.url)
        let statement = WorkerLock.sessionStatement(for: worker)
        let rows = try await connection.query(statement.sql, statement.parameters.map { $0 as (any PostgresEncodable)? }).rows
        #expect(rows.count == 1, "the lock taken and recorded")
        return (connection, try await connection.query("SELECT pg_backend_pid() AS pid").rows[0].int("pid"))
    }

    func claim(_ q: TestQueue, owner: String, _ count: Int) async throws -> [ClaimedJob] {
        _ = try await q.queue.enqueue((0..<count).map { _ in NewJob(kind: .drillNoop, maxAttempts: 3) })
        return try await q.driver.jobClaim(ClaimRequest(owner: owner, lease: .seconds(30), slots: [.drillNoop: count])).jobs
    }

    @Test func aWorkerIsReapedOnceItsSessionEndsAndOnlyThen() async throws {
        let q = try await TestQueue.make()
        let alive = record("w-alive"), elsewhere = record("w-other-run"), unlocked = record("w-unlocked")
        let (session, pid) = try await lockSession(q, alive)
        // Registration after the lock keeps what the lock recorded.
        try await q.driver.workerRegister(alive)
        let mine = try await claim(q, owner: alive.id, 2)
        // A row locked on another server run (before a restart or on the old primary): its lock
        // is free here, but proves nothing.
        try await q.driver.workerRegister(elsewhere)
        try await q.pool.query("UPDATE workers SET lock_server_start = pg_postmaster_start_time() - interval '1 hour' WHERE id = $1", [elsewhere.id])
        let theirs = try await claim(q, owner: elsewhere.id, 1)
        // A worker that never took its lock (an id hashing like another's), and an owner with no row.
        try await q.driver.workerRegister(unlocked)
        let unlockedJobs = try await claim(q, owner: unlocked.id, 1)
        let rowless = try await claim(q, owner: "no-row", 1)

        #expect(try await q.driver.workerReapLost().isEmpty, "the lock is held")
        #expect(try await q.states() == [.running: 5])

        try await q.pool.query("SELECT pg_terminate_backend($1)", [pid])
        var lost: [LostWorker] = []
        try await q.waitUntil(timeout: .seconds(10), "the worker reaped") {
            lost = try await q.driver.workerReapLost()
            return !lost.isEmpty
        }
        withExtendedLifetime(session) {}
        #expect(lost.map(\.id) == [alive.id])
        #expect(lost.first?.jobs.map(\.id) == mine.map(\.id).sorted())
        #expect(lost.first?.jobs.allSatisfy { $0.state == .available } == true)
        for job in mine {
            let record = try #require(try await q.queue.job(id: job.id))
            #expect(record.state == .available && record.attempt == 1 && record.leaseOwner == nil)
            #expect(record.errors.map(\.code) == ["WORKER_LOST"])
            #expect(record.errors.first?.error.contains(alive.id) == true, "\(record.errors)")
        }
        #expect(try await q.sql.query("SELECT last_error_code FROM jobs WHERE id = $1", [mine[0].id]).rows[0]["last_error_code"] == "WORKER_LOST")
        for job in theirs + unlockedJobs + rowless { #expect(try await q.queue.job(id: job.id)?.state == .running) }
        let stopped = try await q.pool.query("SELECT id FROM workers WHERE stopped_at IS NOT NULL").rows.map { try $0.string("id") }
        #expect(stopped == [alive.id])
        // Marked stopped: not probed again.
        #expect(try await q.driver.workerReapLost().isEmpty)

        // The worker, alive after all (its LISTEN connection dropped), settles nothing: its
        // renewal reports the leases lost and its outcomes are refused.
        let renewal = try await q.driver.jobExtendLeases(owner: alive.id, ids: mine.map(\.id), lease: .seconds(30))
        #expect(renewal.kept.isEmpty)
        let finished = try await q.driver.jobFinishMany(owner: alive.id, outcomes: mine.map {
            JobOutcome(jobID: $0.id, attempt: $0.attempt, kind: .completed(result: nil))
        })
        #expect(finished.isEmpty)
        // Once it locks again its row is live, and a second death is found like the first.
        let (second, again) = try await lockSession(q, alive)
        let reclaimed = try await q.driver.jobClaim(ClaimRequest(owner: alive.id, lease: .seconds(30), slots: [.drillNoop: 2])).jobs
        #expect(reclaimed.map(\.attempt) == [2, 2])
        #expect(try await q.driver.workerReapLost().isEmpty)
        withExtendedLifetime(second) {}
        try await q.pool.query("SELECT pg_terminate_backend($1)", [again])
        try await q.waitUntil(timeout: .seconds(10), "reaped again") { try await !q.driver.workerReapLost().isEmpty }
        for job in mine { #expect(try await q.queue.job(id: job.id)?.errors.map(\.code) == ["WORKER_LOST", "WORKER_LOST"]) }
    }

    /// Jobs on their last attempt end `dead`, cancel requests `cancelled`, as the lease rescue
    /// ends them; both, waited for, announce it on `fleet_jobs_finished`, and the jobs to run
    /// again wake the workers of their kind on `fleet_jobs`.
    @Test func lastAttemptsEndAndTheRestWakeTheWorkers() async throws {
        let q = try await TestQueue.make()
        let listening = TestNotifier(url: q.url)
        defer { listening.stop() }
        var events = listening.events([QueueChannel.jobs, QueueChannel.finished])
        #expect(await events.next() == .mightHaveMissed)
        let worker = record("w-dies")
        let (_, pid) = try await lockSession(q, worker)
        let last = try await q.queue.enqueue(NewJob(kind: .drillNoop, maxAttempts: 1))
        let cancelled = try await q.queue.enqueue(NewJob(kind: .drillNoop, maxAttempts: 5))
        let again = try await q.queue.enqueue(NewJob(kind: .drillScript, maxAttempts: 5))
        for waitedFor in [last, cancelled] { try await q.queue.watchFinish(id: waitedFor.id) }
        _ = try await q.driver.jobClaim(ClaimRequest(owner: worker.id, lease: .seconds(30), slots: [.drillNoop: 2, .drillScript: 1]))
        #expect(try await q.queue.cancel(id: cancelled.id) == .requested(owner: worker.id))
        try await q.pool.query("SELECT pg_terminate_backend($1)", [pid])
        try await q.waitUntil(timeout: .seconds(10), "reaped") { try await !q.driver.workerReapLost().isEmpty }
        #expect(try await q.queue.job(id: last.id)?.state == .dead)
        #expect(try await q.queue.job(id: cancelled.id)?.state == .cancelled)
        #expect(try await q.queue.job(id: again.id)?.state == .available)
        // What was sent before the sentinel, the enqueues' included.
        try await q.pool.query("SELECT pg_notify($1, 'sentinel')", [QueueChannel.jobs.name])
        var heard: [NotifierEvent] = []
        while let event = await events.next(), event != .notification(channel: QueueChannel.jobs.name, payload: "sentinel") { heard.append(event) }
        let ended = heard.contains(.notification(channel: QueueChannel.finished.name, payload: "\(last.id),\(cancelled.id)"))
            || heard.contains(.notification(channel: QueueChannel.finished.name, payload: "\(cancelled.id),\(last.id)"))
        #expect(ended && heard.contains(.notification(channel: QueueChannel.jobs.name, payload: JobKind.drillScript.rawValue)), "\(heard)")
    }

    /// Reapers running at once (several dispatchers) take each job once.
    @Test func concurrentReapersTakeEachJobOnce() async throws {
        let q = try await TestQueue.make()
        var pids: [Int] = []
        var jobs: [ClaimedJob] = []
        for index in 0..<5 {
            let worker = record("w-\(index)")
            pids.append(try await lockSession(q, worker).1)
            jobs += try await claim(q, owner: worker.id, 20)
        }
        for pid in pids { try await q.pool.query("SELECT pg_terminate_backend($1)", [pid]) }
        try await q.waitUntil("the locking sessions gone") {
            for pid in pids where try await !q.pool.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1", [pid]).rows.isEmpty { return false }
            return true
        }
        let taken = try await withThrowingTaskGroup(of: [Int64].self) { group in
            for _ in 0..<4 {
                group.addTask {
                    var taken: [Int64] = []
                    for _ in 0..<10 { taken += try await q.driver.workerReapLost().flatMap { $0.jobs.map(\.id) } }
                    return taken
                }
            }
            return try await group.reduce(into: [Int64]()) { $0 += $1 }
        }
        #expect(taken.sorted() == jobs.map(\.id).sorted())
        #expect(try await q.states() == [.available: 100])
        let attempts = try await q.pool.query("SELECT max(jsonb_array_length(errors)) AS most FROM jobs").rows[0]
        #expect(try attempts.int("most") == 1)
    }

    /// The rescue and the reaper share their put-back: the statement the rescue runs is the one
    /// that also wakes the workers (it used to leave rescued jobs to the next poll).
    @Test func theLeaseRescueWakesTheWorkersToo() async throws {
        let q = try await TestQueue.make()
        let listening = TestNotifier(url: q.url)
        defer { listening.stop() }
        var events = listening.events([QueueChannel.jobs.name])
        #expect(await events.next() == .mightHaveMissed)
        _ = try await claim(q, owner: "w", 1)
        #expect(await events.next() == .notification(channel: QueueChannel.jobs.name, payload: JobKind.drillNoop.rawValue), "the enqueue's")
        try await q.travelInTime(.seconds(31))
        #expect(try await q.driver.jobRescueExpired(limit: 10).count == 1)
        #expect(await events.next() == .notification(channel: QueueChannel.jobs.name, payload: JobKind.drillNoop.rawValue))
    }
}

/// Runs each job for its payload's `ms`, logging each attempt's start, cancellation and end.
final class AttemptLogHandler: JobHandler {
    let kind = JobKind.drillNoop
    private let state = Mutex((log: [String](), now: 0))

    var log: [String] { state.withLock { $0.log } }
    var runningNow: Int { state.withLock { $0.now } }

    func run(_ job: ClaimedJob, context: JobContext) async throws -> JSONValue? {
        let fields = try JSONSerialization.jsonObject(with: Data(job.payload.utf8)) as? [String: Any]
        let ms = fields?["ms"] as? Int ?? 0
        state.withLock { $0.log.append("start \(job.id)/\(job.attempt)"); $0.now += 1 }
        defer { state.withLock { $0.now -= 1 } }
        do {
            try await Task.sleep(for: .milliseconds(ms))
        } catch {
            state.withLock { $0.log.append("cancel \(job.id)/\(job.attempt)") }
            throw error
        }
        state.withLock { $0.log.append("done \(job.id)/\(job.attempt)") }
        return nil
    }
}

/// A worker whose LISTEN session drops while it lives: the reaper takes its jobs, and the worker
/// must give them up cleanly.
@Suite(.serialized) struct LostSessionTests {
    /// Its jobs are taken back; it claims one again while the first attempt still runs here (its
    /// lease renewal would only notice ten seconds later): the first attempt is stopped and
    /// records nothing, the second completes the job, once, and every slot is free afterwards.
    @Test func aLiveWorkerWhoseSessionDroppedGivesUpItsJobsAndLeaksNoSlot() async throws {
        let q = try await TestQueue.make()
        let handler = AttemptLogHandler()
        let notifier = Notifier(conninfo: q.url, applicationName: "lost-session-test", logger: testLogger)
        let runtime = WorkerRuntime(
            executable: "test-worker",
            configuration: WorkerConfiguration(concurrency: [.drillNoop: 2], lease: .seconds(30), pollInterval: .milliseconds(100)),
            driver: q.driver, notifier: notifier, handlers: [handler], logger: testLogger)
        notifier.runOnEachSession(WorkerLock.sessionStatement(for: runtime.record))
        let running = RunningService(notifier, runtime)
        let database = String(q.url.split(separator: "/").last!)
        // A database's ALLOW_CONNECTIONS is changed from another one.
        let admin = try await PostgresConnection.connect(PostgresCluster.shared.adminURL)
        func locked() async throws -> Bool {
            try await q.pool.query("""
                SELECT count(*) AS n FROM workers
                WHERE id = $1 AND stopped_at IS NULL AND lock_server_start = pg_postmaster_start_time()
                """, [runtime.id]).rows[0].int("n") == 1
        }

        let job = try await q.queue.enqueue(NewJob(kind: .drillNoop, payload: #"{"ms":3000}"#))
        try await q.waitUntil("running, the lock recorded") {
            guard try await q.states()[.running] == 1 else { return false }
            return try await locked()
        }
        // Connections enough for the moment the database takes no new one.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<6 { group.addTask { try await q.pool.query("SELECT pg_sleep(0.1)") } }
            try await group.waitForAll()
        }
        // The session ends and stays away a moment: the database takes no new connection.
        try await admin.query("ALTER DATABASE \(database) WITH ALLOW_CONNECTIONS false")
        try await q.pool.query("""
            SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'lost-session-test' AND datname = $1
            """, [database])
        var lost: [LostWorker] = []
        do {
            try await q.waitUntil(timeout: .seconds(10), "the worker reaped") {
                lost = try await q.driver.workerReapLost()
                return !lost.isEmpty
            }
        } catch {
            try await admin.query("ALTER DATABASE \(database) WITH ALLOW_CONNECTIONS true")
            throw error
        }
        try await admin.query("ALTER DATABASE \(database) WITH ALLOW_CONNECTIONS true")
        #expect(lost.map(\.id) == [runtime.id] && lost.first?.jobs.map(\.id) == [job.id])

        try await q.waitUntil(timeout: .seconds(20), "completed") { try await q.queue.job(id: job.id)?.state == .completed }
        let done = try #require(try await q.queue.job(id: job.id))
        #expect(done.attempt == 2 && done.errors.map(\.code) == ["WORKER_LOST"], "\(done)")
        #expect(handler.log == ["start \(job.id)/1", "start \(job.id)/2", "cancel \(job.id)/1", "done \(job.id)/2"]
                || handler.log == ["start \(job.id)/1", "cancel \(job.id)/1", "start \(job.id)/2", "done \(job.id)/2"], "\(handler.log)")
        // Locked again on its new session: live, and probed again.
        try await q.waitUntil(timeout: .seconds(10), "locked again") { try await locked() }
        #expect(try await q.driver.workerReapLost().isEmpty)

        // Both slots free: two jobs run at once.
        _ = try await q.queue.enqueue((0..<2).map { _ in NewJob(kind: .drillNoop, payload: #"{"ms":1500}"#) })
        try await q.waitUntil(timeout: .seconds(5), "two running at once") { handler.runningNow == 2 }
        try await running.stop()
    }
}
