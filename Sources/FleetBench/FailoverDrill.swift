import ArgumentParser
import DispatcherProtocol
import DrillKinds
import FleetPostgres
import FleetSchema
import FleetStorage
import FleetSupport
import Foundation
import Imaging
import Providers
import Renders

/// `fleet-bench failover` (run by `scripts/failover-drill.sh`, which makes the primary and its
/// streaming standby): the dispatcher and workers on a `DATABASE_URL` naming both hosts with
/// `target_session_attrs=read-write`, clients sending single and batched enqueues, renders with
/// credits and waits over the dispatcher's socket; then the primary is stopped with
/// `pg_ctl -m immediate`, the standby promoted, and the load goes on. The checks, on the new
/// primary: every job and render a client was given an id for exists, every job ends once,
/// credits balance to the ledger, the waits pending across it are answered, and the fleet
/// (never restarted) claims and enqueues again, measured from the promotion.
struct FailoverDrill: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "failover",
        abstract: "Mixed load while the primary is stopped and its standby promoted; checks what clients were told survived.",
        discussion: "Use scripts/failover-drill.sh, which creates the primary and the standby and tears them down.",
        shouldDisplay: false)

    @Option(help: "The primary's cluster folder (scripts/pg.sh --dir).") var primaryDir: String
    @Option(help: "The primary's port.") var primaryPort: Int
    @Option(help: "The standby's cluster folder.") var standbyDir: String
    @Option(help: "The standby's port.") var standbyPort: Int
    @Option(help: "sync or async: how the script set up the standby (sync: zero loss is checked).") var replication = "sync"
    @Option(help: "Seconds of load before the primary is stopped.") var loadSeconds = 8.0
    @Option(help: "Seconds between the stop and the promotion (the time to notice and decide).") var outageSeconds = 2.0
    @Option(help: "Seconds of load after the promotion.") var afterSeconds = 8.0
    @Option(help: "Seconds the primary's WAL sender is stopped (SIGSTOP) before the primary is: the standby falls behind as over a slow link, which on loopback it never is. 0: not stopped.")
    var standbyStallSeconds = 1.0
    @Flag(help: "Print one JSON object per line ({\"metric\",\"value\",\"unit\"}) after the table.") var json = false

    /// The fleet stays on this URL throughout: libpq finds whichever host is read-write.
    var databaseURL: String {
        "postgresql://postgres@127.0.0.1:\(primaryPort),127.0.0.1:\(standbyPort)/wearbloom?target_session_attrs=read-write"
    }

    func run() async throws {
        guard replication == "sync" || replication == "async" else { throw ValidationError("--replication is sync or async") }
        try await Migrator(migrations: FleetSchema.migrations, logger: .init(label: "fleet-bench")).migrate(conninfo: databaseURL)
        let pool = PostgresPool(conninfo: databaseURL, maxConnections: 2, applicationName: "fleet-failover-drill")
        let root = NSTemporaryDirectory() + "fleet-failover-\(getpid())"
        defer { try? FileManager.default.removeItem(atPath: root) }
        try await prepareRenders(pool: pool, root: root)

        let executions = root + "/executions.log"
        let socket = NSTemporaryDirectory() + "fleet-failover-\(getpid()).sock"
        let fleet = Fleet(hosts: [ChaosRun.Host(name: "local", address: "127.0.0.1")], port: primaryPort, databaseURL: databaseURL, images: .files(root: root))
        defer { fleet.stopAll() }
        let environment = ["FLEET_LEASE_SECONDS": "5", "FLEET_RETRY_BASE_MS": "100", "FLEET_HTTP_ADDRESS": "off"]
        _ = try fleet.start("dispatcher", index: 0, environment: environment.merging([
            "FLEET_DISPATCHER_TCP": "off", "FLEET_DISPATCHER_SOCKET": socket,
        ]) { $1 })
        for index in 0..<2 {
            _ = try fleet.start("fleet-drill", index: index, environment: environment.merging([
                "FLEET_CONCURRENCY": "drill.script=16", "FLEET_EXECUTION_LOG": executions,
            ]) { $1 })
        }
        _ = try fleet.start("render-worker", index: 0, environment: environment)
        let clients = try await connectClients(socket: socket, count: FailoverLoad.clientCount)

        let load = FailoverLoad(clients: clients)
        let running = Task { await load.run() }
        try await Task.sleep(for: .seconds(loadSeconds - 1.5))
        let waits = Task { await load.waitAcrossTheFailover(jobs: 6, on: clients.last!) }
        try await Task.sleep(for: .seconds(1.5))

        // Stopped, the primary's WAL sender sends nothing more (what it sent before is in the
        // standby's socket) and confirms nothing: commits since are on the primary alone. It dies
        // with the primary, killed: continued, it would send them on its way out.
        let sender = try await pool.query("SELECT pid FROM pg_stat_replication").rows.first.map { try $0.int("pid") }
        if standbyStallSeconds > 0, let sender {
            progress("failover: the primary's WAL sender stopped for \(standbyStallSeconds) s")
            kill(pid_t(sender), SIGSTOP)
            try await Task.sleep(for: .seconds(standbyStallSeconds))
            kill(pid_t(sender), SIGKILL)
        }
        progress("failover: stopping the primary (pg_ctl -m immediate)")
        try await pgScript(["stop", "--mode", "immediate", "--dir", primaryDir, "--port", "\(primaryPort)"])
        try await Task.sleep(for: .seconds(outageSeconds))
        progress("failover: promoting the standby")
        let promotedAt = Date()
        try await pgScript(["promote", "--dir", standbyDir, "--port", "\(standbyPort)"])
        let promotionSeconds = Date().timeIntervalSince(promotedAt)
        try await Task.sleep(for: .seconds(afterSeconds))
        await load.stop()
        await running.value
        let waitOutcomes = await waits.value
        for client in clients { await client.close() }

        let record = await load.record
        progress("failover: \(record.jobs.count) jobs and \(record.renders.count) renders acknowledged; draining")
        try await waitUntilDrained(record, pool: pool, timeout: .seconds(120))
        let outcome = try await check(record, waits: waitOutcomes, executions: ExecutionLog.counts(executions), pool: pool,
                                      promotedAt: promotedAt, promotionSeconds: promotionSeconds)
        print(outcome.table)
        if json { for line in outcome.jsonLines { print(line) } }
        if !outcome.passed { throw ExitCode.failure }
    }

    private func prepareRenders(pool: PostgresPool, root: String) async throws {
        let storage = FileImageStorage(root: root)
        let user = try StorageID(FailoverLoad.user)
        let photo = try ImageNormalizer(profile: NormalizeProfile(maxWidth: 400))
            .normalize(path: packageRoot.appendingPathComponent("scripts/demo/garment-on-plain-background.jpg").path).jpeg
        try await storage.write(photo, to: .bodyPhoto(user: user, photo: StorageID("b1")))
        try await storage.write(photo, to: .garment(user: user, garment: StorageID("g1")))
        try await RenderSettings(provider: LocalTryOnProvider.name, enabledCategories: Set(GarmentCategory.allCases)).save(to: pool)
        try await pool.query("INSERT INTO credits (user_id, total_granted) VALUES ($1, 100000)", [FailoverLoad.user])
    }

    /// Connects once the dispatcher has migrated and opened its socket.
    private func connectClients(socket: String, count: Int) async throws -> [DispatcherClient] {
        let deadline = ContinuousClock.now + .seconds(60)
        while true {
            do {
                var clients: [DispatcherClient] = []
                for _ in 0..<count { clients.append(try await DispatcherClient.connect(to: .unix(path: socket))) }
                return clients
            } catch where ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(200))
            }
        }
    }

    private func pgScript(_ arguments: [String]) async throws {
        let output = NSTemporaryDirectory() + "fleet-failover-pg-\(getpid()).log"
        let status = try await ChildProcess.run(packageRoot.appendingPathComponent("scripts/pg.sh").path, arguments, outputPath: output)
        guard status == 0 else { throw BenchError("scripts/pg.sh \(arguments.joined(separator: " ")) failed: \((try? String(contentsOfFile: output, encoding: .utf8)) ?? "")") }
    }

    /// Until every acknowledged job that exists has ended (those lost with the primary never will).
    private func waitUntilDrained(_ record: FailoverLoad.Record, pool: PostgresPool, timeout: Duration) async throws {
        let ids = record.jobs.map(\.id) + record.renders.compactMap(\.jobID)
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let open = try await pool.withRetry { connection in
                try await connection.query("SELECT count(*) AS n FROM jobs WHERE id = ANY($1) AND state IN ('available', 'running', 'waiting')",
                                           [PostgresArray(ids)]).rows[0].int("n")
            }
            if open == 0 { return }
            try await Task.sleep(for: .milliseconds(250))
        }
        progress("failover: jobs still open after \(timeout)")
    }

    struct Outcome {
        let table: String
        let jsonLines: [String]
        let passed: Bool
    }

    private func check(
        _ record: FailoverLoad.Record, waits: [FailoverLoad.WaitOutcome], executions: [Int64: Int], pool: PostgresPool,
        promotedAt: Date, promotionSeconds: Double
    ) async throws -> Outcome {
        // A job is the one acknowledged only if its row carries the client's mark: after an
        // asynchronous failover, a lost job's id can be given to a later job.
        let rows = try await pool.query("""
            SELECT id, payload->>'mark' AS mark, state::text AS state FROM jobs WHERE id = ANY($1)
            """, [PostgresArray(record.jobs.map(\.id))]).rows
        var found: [Int64: (mark: String?, state: String)] = [:]
        for row in rows { found[try row.int64("id")] = (row["mark"], try row.string("state")) }
        let lostJobs = record.jobs.filter { found[$0.id]?.mark != $0.mark }
        let notCompleted = record.jobs.filter { job in found[job.id].map { $0.mark == job.mark && $0.state != "completed" } ?? false }
        let survivingIDs = Set(record.jobs.map(\.id)).subtracting(lostJobs.map(\.id))
        let executedAgain = survivingIDs.filter { (executions[$0] ?? 0) > 1 }.count
        let executedButLost = lostJobs.filter { (executions[$0.id] ?? 0) > 0 }.count

        let renderRows = try await pool.query("""
            SELECT r.id, r.status::text AS status,
                   (SELECT count(*) FROM credit_ledger l WHERE l.render_id = r.id AND l.entry = 'consume') AS consumes
            FROM renders r WHERE r.id = ANY($1)
            """, [PostgresArray(record.renders.map(\.id))]).rows
        var renders: [String: (status: String, consumes: Int)] = [:]
        for row in renderRows { renders[try row.string("id")] = (try row.string("status"), try row.int("consumes")) }
        let lostRenders = record.renders.filter { renders[$0.id] == nil }.count
        let chargedTwice = renders.values.filter { $0.consumes > 1 }.count
        let completeUncharged = renders.values.filter { $0.status == "complete" && $0.consumes != 1 }.count
        let unfinishedRenders = renders.values.filter { $0.status != "complete" && $0.status != "failed" }.count
        let balance = try await pool.query("""
            SELECT c.total_consumed AS consumed,
                   (SELECT count(*) FROM credit_ledger WHERE user_id = $1 AND entry = 'consume')
                   - (SELECT count(*) FROM credit_ledger WHERE user_id = $1 AND entry = 'refund') AS ledger
            FROM credits c WHERE c.user_id = $1
            """, [FailoverLoad.user]).rows[0]
        let creditsBalance = try balance.int("consumed") == balance.int("ledger")

        let firstClaim = try await pool.query("""
            SELECT extract(epoch FROM min(started_at) - to_timestamp($1)) AS seconds FROM jobs WHERE started_at >= to_timestamp($1)
            """, [promotedAt.timeIntervalSince1970]).rows[0]["seconds"].flatMap(Double.init)
        let firstEnqueue = (record.jobs.map(\.acknowledgedAt) + record.renders.map(\.acknowledgedAt))
            .filter { $0 > promotedAt }.min().map { $0.timeIntervalSince(promotedAt) }
        let waitsAnswered = waits.filter(\.answeredEnded).count

        let duplicated = chargedTwice + (creditsBalance ? 0 : 1) + completeUncharged
        let lost = lostJobs.count + lostRenders
        let resumed = max(firstClaim ?? .infinity, firstEnqueue ?? .infinity)
        let ended = notCompleted.isEmpty && unfinishedRenders == 0
        let passed = duplicated == 0 && ended
            && (replication == "async" || (lost == 0 && resumed <= 10 && waitsAnswered == waits.count))

        let figures: [(String, Double, String)] = [
            ("failover.\(replication).acknowledged_jobs", Double(record.jobs.count), "jobs"),
            ("failover.\(replication).acknowledged_renders", Double(record.renders.count), "renders"),
            ("failover.\(replication).lost", Double(lost), "acknowledged"),
            ("failover.\(replication).lost_renders", Double(lostRenders), "renders"),
            ("failover.\(replication).duplicated", Double(duplicated), "charges"),
            ("failover.\(replication).not_ended", Double(notCompleted.count + unfinishedRenders), "jobs"),
            ("failover.\(replication).executed_again", Double(executedAgain), "jobs"),
            ("failover.\(replication).executed_but_lost", Double(executedButLost), "jobs"),
            ("failover.\(replication).first_claim_after_promotion", firstClaim ?? -1, "s"),
            ("failover.\(replication).first_enqueue_after_promotion", firstEnqueue ?? -1, "s"),
            ("failover.\(replication).promotion", promotionSeconds, "s"),
            ("failover.\(replication).waits_answered", Double(waitsAnswered), "of \(waits.count)"),
            ("failover.\(replication).refused_during_outage", Double(record.refused), "requests"),
        ]
        func format(_ value: Double) -> String { value.rounded() == value ? String(Int(value)) : String(format: "%.2f", value) }
        var lines = [
            "failover drill (\(replication) replication): the primary's WAL sender stopped \(format(standbyStallSeconds)) s, then the primary "
                + "stopped -m immediate, the standby promoted after \(format(outageSeconds)) s",
            "measure                          value  unit",
        ]
        for (metric, value, unit) in figures {
            let name = String(metric.dropFirst("failover.\(replication).".count))
            let shown = format(value)
            lines.append(name.padding(toLength: 32, withPad: " ", startingAt: 0) + String(repeating: " ", count: max(1, 7 - shown.count)) + shown + "  " + unit)
        }
        lines.append("credits balance to the ledger: \(creditsBalance ? "yes" : "NO"); renders charged twice: \(chargedTwice)")
        lines.append(passed ? "passed" : "FAILED: \(replication == "sync" ? "lost, duplicated, unended, unanswered or slow" : "duplicated or unended")")
        let jsonLines = figures.map { metric, value, unit in
            #"{"metric":"\#(metric)","value":\#(format(value)),"unit":"\#(unit)"}"#
        }
        return Outcome(table: lines.joined(separator: "\n"), jsonLines: jsonLines, passed: passed)
    }
}

/// The clients' side of the drill: what they sent and what they were told.
actor FailoverLoad {
    static let user = "failover"
    /// Three single enqueuers, one batch enqueuer, one render requester, one for the waits.
    static let clientCount = 6

    struct Job {
        let id: Int64
        let mark: String
        let acknowledgedAt: Date
    }

    struct Render {
        let id: String
        let jobID: Int64?
        let acknowledgedAt: Date
    }

    struct Record {
        var jobs: [Job] = []
        var renders: [Render] = []
        /// Requests the dispatcher answered with an error (the database unreachable).
        var refused = 0
    }

    struct WaitOutcome {
        /// Answered with the job ended (not timed out, not an error).
        let answeredEnded: Bool
    }

    private let clients: [DispatcherClient]
    private(set) var record = Record()
    private var stopped = false

    init(clients: [DispatcherClient]) {
        self.clients = clients
    }

    func stop() { stopped = true }

    func run() async {
        await withTaskGroup(of: Void.self) { group in
            for (index, client) in clients.prefix(3).enumerated() {
                group.addTask { await self.singleEnqueues(client, name: "s\(index)") }
            }
            group.addTask { await self.batchEnqueues(self.clients[3]) }
            group.addTask { await self.renders(self.clients[4]) }
        }
    }

    private func singleEnqueues(_ client: DispatcherClient, name: String) async {
        var sequence = 0
        while !stopped {
            sequence += 1
            let mark = "\(name)-\(sequence)"
            do {
                let job = try await client.enqueue(kind: "drill.script", payload: ["sleepMs": .number(100), "mark": .string(mark)])
                record.jobs.append(Job(id: job.jobId, mark: mark, acknowledgedAt: Date()))
            } catch {
                await refused()
            }
            try? await Task.sleep(for: .milliseconds(40))
        }
    }

    private func batchEnqueues(_ client: DispatcherClient) async {
        var sequence = 0
        while !stopped {
            sequence += 1
            let marks = (0..<10).map { "b\(sequence)-\($0)" }
            do {
                let graph = try await client.enqueueGraph(marks.map {
                    EnqueueGraphRequest.Job(name: $0, kind: "drill.script", payload: ["sleepMs": .number(100), "mark": .string($0)])
                })
                let now = Date()
                for (job, mark) in zip(graph.jobs, marks) { record.jobs.append(Job(id: job.jobId, mark: mark, acknowledgedAt: now)) }
            } catch {
                await refused()
            }
            try? await Task.sleep(for: .milliseconds(200))
        }
    }

    private func renders(_ client: DispatcherClient) async {
        var sequence = 0
        while !stopped {
            sequence += 1
            let id = "r\(sequence)"
            do {
                let render = try await client.send(RequestRenderRequest(
                    renderId: id, userId: Self.user, garmentId: "g1", bodyPhotoId: "b1", category: "tops"))
                record.renders.append(Render(id: id, jobID: render.jobId, acknowledgedAt: Date()))
            } catch {
                await refused()
            }
            try? await Task.sleep(for: .milliseconds(250))
        }
    }

    private func refused() async {
        record.refused += 1
        try? await Task.sleep(for: .milliseconds(100))
    }

    /// Jobs long enough to be running when the primary stops, each waited for (one request
    /// each, pending across the failover).
    func waitAcrossTheFailover(jobs count: Int, on client: DispatcherClient) async -> [WaitOutcome] {
        var ids: [Int64] = []
        for index in 0..<count {
            let mark = "w-\(index)"
            guard let job = try? await client.enqueue(kind: "drill.script", payload: ["sleepMs": .number(2500), "mark": .string(mark)]) else { continue }
            record.jobs.append(Job(id: job.jobId, mark: mark, acknowledgedAt: Date()))
            ids.append(job.jobId)
        }
        return await withTaskGroup(of: WaitOutcome.self) { group in
            for id in ids {
                group.addTask {
                    let answer = try? await client.wait(jobId: id, timeoutMs: 90_000)
                    return WaitOutcome(answeredEnded: answer.map { !$0.timedOut && $0.job.isTerminal } ?? false)
                }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
    }
}
