import DispatcherProtocol
import DrillKinds
import FakeProviders
import FleetHTTPClient
@testable import FleetQueue
import FleetPostgres
import FleetSchema
@testable import FleetTestSupport
import Foundation
@testable import Providers
import Renders
import Testing

/// The fleet behind a real PgBouncer in transaction mode (`scripts/pgbouncer.sh`, pool size 8):
/// what needs a session does not go through it (docs/operations.md, "Behind PgBouncer"). The
/// queue driver's contract runs through it too (`DriverExecutor.pgbouncer`).
@Suite(.serialized) struct PgBouncerTests {
    /// A database of the shared cluster and its URL through the shared PgBouncer.
    func database() async throws -> (direct: String, pooled: String) {
        try await PgBouncer.startSharedOnce()
        let direct = try await PostgresCluster.shared.makeEmptyDatabase()
        return (direct, PgBouncer.shared.url(through: direct))
    }

    /// A name prepared on one server connection is unknown on the next (or taken there by
    /// another client's statement): through a transaction pooler, clients must use the unnamed
    /// statement, which lives within the one round trip.
    @Test(arguments: StatementMode.allCases) func onlyUnnamedStatementsCrossATransactionPooler(_ mode: StatementMode) async throws {
        let (_, pooled) = try await database()
        var clients: [PostgresConnection] = []
        for _ in 0..<4 { clients.append(try await PostgresConnection.connect(pooled, statements: mode)) }
        var failures: [String] = []
        for round in 0..<3 {
            for (index, client) in clients.enumerated() {
                do {
                    let sum = try await client.query("SELECT $1::int + \(index) AS sum", [round]).rows[0].int("sum")
                    #expect(sum == round + index)
                } catch {
                    failures.append("\(error)")
                }
            }
        }
        switch mode {
        case .prepared: #expect(!failures.isEmpty, "named statements happened to work through PgBouncer")
        case .unnamed: #expect(failures.isEmpty, "\(failures)")
        }
    }

    /// The migrator's lock is scoped to each version's transaction: ten processes migrating at
    /// once through the pooler apply each version once (a session lock would be taken on one
    /// server connection and the migrations run on others).
    @Test func tenMigratorsThroughPgBouncerApplyEachVersionOnce() async throws {
        let (direct, pooled) = try await database()
        let applied = try await withThrowingTaskGroup(of: [Int].self) { group in
            for _ in 0..<10 {
                group.addTask { try await Migrator(migrations: FleetSchema.migrations, logger: testLogger).migrate(conninfo: pooled, statements: .unnamed) }
            }
            return try await group.reduce(into: []) { $0 += $1 }
        }
        let versions = Set(FleetSchema.migrations.map(\.version))
        #expect(applied.sorted() == versions.sorted())
        let recorded = try await PostgresConnection.connect(direct).query("SELECT count(*) AS n FROM schema_migrations").rows[0]
        #expect(try recorded.int("n") == versions.count)
    }

    /// Poll-only (`FLEET_LISTEN_DATABASE_URL=off`): no session, and every subscription is told to
    /// look again at once and then every interval.
    @Test func aPollOnlyNotifierTellsEverySubscriptionToLookAgainEveryInterval() async throws {
        let notifier = Notifier.pollOnly(every: .milliseconds(200), logger: testLogger)
        let running = Task { await notifier.run() }
        defer { running.cancel() }
        var events = notifier.subscribe(to: ["a", "b"]).events.makeAsyncIterator()
        let started = ContinuousClock.now
        for _ in 0..<3 { #expect(await events.next() == .mightHaveMissed) }
        let elapsed = ContinuousClock.now - started
        #expect(elapsed >= .milliseconds(390), "three events over two intervals: \(elapsed)")
        #expect(try await notifier.listeningChannels() == [])
        running.cancel()
        #expect(await events.next() == nil)
    }

    /// `FLEET_TEST_PGBOUNCER_PROCESSES` worker processes (default 40) drain 20,000 jobs through
    /// PgBouncer in transaction mode, their LISTEN sessions direct, while one is killed with
    /// SIGKILL (and replaced) every half second: every job completes (a killed worker's jobs
    /// when their 3 s leases run out: no dispatcher reaps here), no attempt runs twice, and
    /// the database serves the pool's 8 server connections plus one LISTEN session per process.
    @Test func manyWorkerProcessesDrainThroughPgBouncerOnItsPoolSize() async throws {
        let processes = ProcessInfo.processInfo.environment["FLEET_TEST_PGBOUNCER_PROCESSES"].flatMap { Int($0) } ?? 40
        let total = 20_000, kills = 10
        let q = try await TestQueue.make(executor: .pgbouncer)
        let pooled = PgBouncer.shared.url(through: q.url)
        let database = String(q.url.split(separator: "/").last!)
        let log = temporaryPath("executions")
        let environment = [
            "FLEET_DATABASE_STATEMENTS": "unnamed", "FLEET_LEASE_SECONDS": "3",
            // Over the Unix socket: told apart from PgBouncer's connections by their address alone.
            "FLEET_LISTEN_DATABASE_URL": try await PostgresCluster.shared.socketURL(q.url),
        ]
        func startWorker() throws -> WorkerProcess { try WorkerProcess(databaseURL: pooled, executionLog: log, environment: environment) }
        var workers = try (0..<processes).map { _ in try startWorker() }
        defer { for worker in workers { worker.signal(SIGKILL) } }

        let admin = try await PostgresConnection.connect(PostgresCluster.shared.adminURL)
        let bouncerAdmin = try await PostgresConnection.connect(PgBouncer.shared.adminURL)
        let sampling = Task {
            var most = ServerConnections(), mostPooled = 0
            while !Task.isCancelled {
                let now = try await ServerConnections.of(database: database, admin: admin)
                most = ServerConnections(listeners: max(most.listeners, now.listeners), others: max(most.others, now.others))
                mostPooled = max(mostPooled, try await PgBouncer.shared.serverConnections(of: database, admin: bouncerAdmin))
                try? await Task.sleep(for: .milliseconds(50))
            }
            return (most, mostPooled)
        }
        defer { sampling.cancel() }
        try await q.waitUntil(timeout: .seconds(60), "every process listening") {
            try await ServerConnections.of(database: database, admin: admin).listeners == processes
        }

        // A batch every quarter second, a kill every other one: the kills land on running jobs.
        let batches = 2 * kills, batch = total / batches
        for index in 0..<batches {
            _ = try await q.queue.enqueue(try (0..<batch).map { _ in try NewJob(DrillScript(sleepMs: 400)) })
            try await Task.sleep(for: .milliseconds(250))
            guard index.isMultiple(of: 2) else { continue }
            let victim = Int.random(in: 0..<workers.count)
            workers[victim].signal(SIGKILL)
            _ = await workers[victim].wait()
            workers[victim] = try startWorker()
        }
        try await q.waitUntil(timeout: .seconds(300), "\(total) completed") { try await q.states()[.completed] == total }
        sampling.cancel()
        let (most, mostPooled) = try await sampling.value
        // The replacements are up (a SIGTERM before a process handles signals would kill it).
        try await q.waitUntil(timeout: .seconds(60), "every process listening") {
            try await ServerConnections.of(database: database, admin: admin).listeners == processes
        }
        for worker in workers { worker.signal(SIGTERM) }
        for worker in workers {
            let status = await worker.wait()
            #expect(status == 0, "exit \(String(describing: status)): \(worker.log.suffix(2000))")
        }

        #expect(try await q.states() == [.completed: total])
        let runs = executionLines(log)
        #expect(Set(runs.map(\.id)).count == total, "every job ran")
        let repeated = Dictionary(grouping: runs, by: { $0 }).filter { $0.value.count > 1 }
        #expect(repeated.isEmpty, "an attempt ran twice: \(repeated.keys.prefix(5))")
        // PgBouncer never holds more than its pool. The server may show one more for a moment: a
        // client killed mid-transaction makes PgBouncer close that server connection, and the
        // replacement it opens can log in before the old backend has exited.
        #expect(mostPooled <= PgBouncer.poolSize, "PgBouncer's server connections: \(mostPooled)")
        #expect(most.others <= PgBouncer.poolSize + 1, "server connections through PgBouncer: \(most.others)")
        #expect(most.listeners <= processes + 1, "LISTEN sessions: \(most.listeners)")
        print("pgbouncer: \(processes) processes, \(kills) SIGKILLs, \(total) jobs: at most \(mostPooled) server connections held by PgBouncer (pool \(PgBouncer.poolSize)), \(most.others) in pg_stat_activity + \(most.listeners) LISTEN sessions; \(runs.count - total) runs again after a kill")
    }

    /// The dispatcher (its migrations, schedule, reaper and `wait`s) and a worker both through
    /// PgBouncer, with the LISTEN sessions direct or none (poll-only, every 200 ms): jobs
    /// enqueued over the socket complete, and every `wait` is answered with the completion.
    @Test(arguments: [false, true]) func aDispatcherAndAWorkerThroughPgBouncerAnswerEveryWait(pollOnly: Bool) async throws {
        let q = try await TestQueue.make(executor: .pgbouncer)
        let pooled = PgBouncer.shared.url(through: q.url)
        let environment = [
            "FLEET_DATABASE_STATEMENTS": "unnamed", "FLEET_LISTEN_DATABASE_URL": pollOnly ? "off" : q.url, "FLEET_POLL_INTERVAL_MS": "200",
        ]
        let dispatcher = try DispatcherProcess(databaseURL: pooled, environment: environment)
        try await dispatcher.start()
        defer { dispatcher.signal(SIGKILL) }
        let worker = try WorkerProcess(databaseURL: pooled, environment: environment)
        defer { worker.signal(SIGKILL) }
        let client = try await dispatcher.client(poolSize: 4)
        var jobs: [Int64] = []
        for _ in 0..<20 { jobs.append(try await client.send(EnqueueRequest(kind: "drill.noop")).jobId) }
        let answers = try await withThrowingTaskGroup(of: WaitRequest.Result.self) { group in
            for job in jobs { group.addTask { try await client.send(WaitRequest(jobId: job, timeoutMs: 20_000)) } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(answers.count == jobs.count && answers.allSatisfy { !$0.timedOut && $0.job.state == .completed })
        await client.close()
        worker.signal(SIGTERM)
        dispatcher.signal(SIGTERM)
        #expect(await worker.wait() == 0, "\(worker.log)")
        #expect(await dispatcher.wait(timeout: .seconds(30)) == 0, "\(dispatcher.log.suffix(2000))")
    }

    /// Job control through PgBouncer: an operator pauses a kind, cancels, retries and discards
    /// jobs one by one and in bulk, and reads the audit trail, over a dispatcher whose every
    /// statement goes through the transaction pool; the rows show each change, and a worker
    /// through PgBouncer then drains what is left.
    @Test func jobControlThroughPgBouncer() async throws {
        let q = try await TestQueue.make(executor: .pgbouncer)
        let pooled = PgBouncer.shared.url(through: q.url)
        let environment = ["FLEET_DATABASE_STATEMENTS": "unnamed", "FLEET_LISTEN_DATABASE_URL": q.url]
        let dispatcher = try DispatcherProcess(databaseURL: pooled, environment: environment)
        try await dispatcher.start()
        defer { dispatcher.signal(SIGKILL) }
        let client = try await dispatcher.client()
        #expect(try await client.send(QueuePauseRequest(kind: "drill.noop")).changed)
        var jobs: [Int64] = []
        for _ in 0..<6 { jobs.append(try await client.send(EnqueueRequest(kind: "drill.noop")).jobId) }
        for job in jobs.prefix(5) { #expect(try await client.send(CancelRequest(jobId: job)).outcome == .cancelled) }
        #expect(try await client.send(JobRetryRequest(jobId: jobs[0])).state == .available)
        #expect(try await client.send(JobDiscardRequest(jobId: jobs[1])).discarded)
        let cancelled = JobFilterArguments(states: [.cancelled])
        #expect(try await client.send(JobsRetryRequest(filter: cancelled, limit: 2)) == BulkJobsResult(count: 2, dryRun: false))
        #expect(try await client.send(JobsDiscardRequest(filter: cancelled, limit: 100)) == BulkJobsResult(count: 1, dryRun: false))
        #expect(try await q.states() == [.available: 4])
        #expect(try await client.send(QueueResumeRequest(kind: "drill.noop")).changed)
        let audit = try await client.send(AuditListRequest()).entries.map(\.action)
        #expect(audit == ["queue.resume", "jobs.discard", "jobs.retry", "job.discard", "job.retry", "queue.pause"])
        let worker = try WorkerProcess(databaseURL: pooled, environment: environment)
        defer { worker.signal(SIGKILL) }
        try await q.waitUntil("4 completed") { try await q.states() == [.completed: 4] }
        await client.close()
    }

    /// Poll-only through PgBouncer: no LISTEN session anywhere and no worker lock (its leases are
    /// the guarantee), and the worker still drains what is enqueued.
    @Test func aPollOnlyWorkerDrainsThroughPgBouncerWithoutASession() async throws {
        let q = try await TestQueue.make(executor: .pgbouncer)
        let database = String(q.url.split(separator: "/").last!)
        let worker = try WorkerProcess(databaseURL: PgBouncer.shared.url(through: q.url), environment: [
            "FLEET_DATABASE_STATEMENTS": "unnamed", "FLEET_LISTEN_DATABASE_URL": "off",
        ])
        _ = try await q.queue.enqueue((0..<500).map { _ in NewJob(kind: .drillNoop) })
        try await q.waitUntil("500 completed") { try await q.states()[.completed] == 500 }
        let admin = try await PostgresConnection.connect(PostgresCluster.shared.adminURL)
        let listeners = try await admin.query(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = $1 AND application_name = 'wearbloom-listener'", [database]).rows[0]
        #expect(try listeners.int("n") == 0)
        let locked = try await q.sql.query("SELECT count(*) FILTER (WHERE lock_server_start IS NOT NULL) AS n FROM workers").rows[0]
        #expect(try locked.int("n") == 0)
        worker.signal(SIGTERM)
        #expect(await worker.wait() == 0, "\(worker.log)")
    }

    /// A render with credits and the console's pages, the dispatcher and the render worker both
    /// through PgBouncer (unnamed statements, LISTEN direct): the render completes by fal's signed
    /// webhook and consumes its credit once; every page loads, each read through the pooler
    /// (its transactions counted by PgBouncer's `SHOW STATS`).
    @Test func aRenderWithCreditsAndTheConsoleThroughPgBouncer() async throws {
        let fal = try await FakeFal.start(webhookClient: CurlHTTPClient())
        fal.update { $0.latency = .milliseconds(300) }
        let f = try await RenderFixture.make(provider: FashnProvider.name, fal: fal, executor: .pgbouncer)
        try await f.grant("u1", credits: 2)
        let q = f.q, root = f.root
        defer { try? FileManager.default.removeItem(atPath: root) }
        let pooled = PgBouncer.shared.url(through: q.url)
        let database = String(q.url.split(separator: "/").last!)

        let pooler = [
            "FLEET_DATABASE_STATEMENTS": "unnamed", "FLEET_LISTEN_DATABASE_URL": q.url, "FLEET_STORAGE_ROOT": root,
        ]
        let dispatcher = try DispatcherProcess(databaseURL: pooled, environment: pooler.merging([
            "FLEET_CONSOLE": "on", "FLEET_FAL_JWKS_URL": fal.jwksURL,
        ]) { $1 })
        try await dispatcher.start()
        defer { dispatcher.signal(SIGKILL) }
        let worker = try WorkerProcess(databaseURL: pooled, executable: "render-worker", environment: pooler.merging([
            "FAL_KEY": fal.key, "FAL_QUEUE_URL": fal.baseURL, "FLEET_RENDER_WEBHOOK_URL": "http://127.0.0.1:\(dispatcher.httpPort)/webhooks/fal",
            "FLEET_RENDER_WEBHOOK_GRACE_MS": "60000",
        ]) { $1 })
        defer { worker.signal(SIGKILL) }

        let client = try await dispatcher.client()
        let requested = try await client.send(RequestRenderRequest(renderId: "r-pooled", userId: "u1", garmentId: "g1", bodyPhotoId: "b1", category: "tops"))
        #expect(requested.charged)
        let waited = try await client.send(WaitRenderRequest(renderId: "r-pooled", timeoutMs: 30_000))
        #expect(!waited.timedOut && waited.render.status == .complete, "dispatcher: \(dispatcher.log.suffix(1500))\nworker: \(worker.log.suffix(1500))")
        let credits = try await q.sql.query("SELECT total_granted, total_consumed FROM credits WHERE user_id = 'u1'").rows[0]
        #expect(try [credits.int("total_granted"), credits.int("total_consumed")] == [2, 1])
        let ledger = try await q.sql.query("SELECT entry FROM credit_ledger WHERE render_id = 'r-pooled' ORDER BY id").rows.map { try $0.string("entry") }
        #expect(ledger == ["reserve", "consume"])
        await client.close()

        let admin = try await PostgresConnection.connect(PgBouncer.shared.adminURL)
        let console = PooledConsole(port: dispatcher.httpPort)
        let (session, _) = try await console.login(DispatcherProcess.token)
        for path in ["/console", "/console/live/overview", "/console/jobs", "/console/jobs/\(try #require(requested.jobId))", "/console/dead",
                     "/console/queues", "/console/workers", "/console/schedule", "/console/renders", "/console/audit"] {
            let before = try await transactions(of: database, admin: admin)
            let page = try await console.get(path, session: session)
            #expect(page.status == 200, "\(path): \(page.status) \(page.body.prefix(300))")
            let after = try await transactions(of: database, admin: admin)
            #expect(after > before, "\(path) read nothing through PgBouncer")
        }
        let renders = try await console.get("/console/renders", session: session).body
        #expect(renders.contains("r-pooled"))

        worker.signal(SIGTERM)
        dispatcher.signal(SIGTERM)
        #expect(await worker.wait() == 0, "\(worker.log.suffix(1500))")
        #expect(await dispatcher.wait(timeout: .seconds(30)) == 0, "\(dispatcher.log.suffix(1500))")
        await fal.stop()
    }

    /// The transactions PgBouncer has carried for `database` (`SHOW STATS`).
    private func transactions(of database: String, admin: PostgresConnection) async throws -> Int {
        try await admin.query("SHOW STATS").rows.filter { $0["database"] == database }.reduce(0) { try $0 + $1.int("total_xact_count") }
    }
}

private struct PooledConsole: ConsoleClient {
    let port: Int
}
