import ArgumentParser
import DispatcherCore
import DispatcherProtocol
import DrillKinds
import FleetPostgres
import FleetQueue
import FleetStorage
import FleetSupport
import Foundation
import Imaging
import Providers
import Renders

/// `fleet-bench chaos` (run by `scripts/chaos.sh`, which makes the hosts): the dispatcher here,
/// and worker processes on
/// several "hosts" — network namespaces reaching PostgreSQL (and, with `--storage s3`, the S3
/// gateway) over a veth pair — do a mixed load of image, garment (normalise, then cut-out),
/// render and drill jobs while workers are killed with SIGKILL and replaced at random; then every
/// job and render is checked to have ended exactly once, and every image output is read back from
/// the store and compared with the same pipeline run here. With 1, 2 and 4 worker
/// processes it checks that each added process adds its slots (jobs running at once: a count, so
/// the check holds on a loaded machine) and reports the drill throughput, a figure and not a pass
/// mark: on two cores, four processes are CPU-bound well before their slots are.
struct ChaosRun: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "chaos",
        abstract: "Mixed load on workers spread over network namespaces, with random SIGKILLs; checks nothing is lost or done twice.",
        discussion: "Use scripts/chaos.sh, which creates the namespaces, the database and tears them down.",
        shouldDisplay: false)

    @Option(help: "A host as NAME=ADDRESS: workers run under `ip netns exec NAME` and reach PostgreSQL (and the S3 gateway) at ADDRESS; `local=127.0.0.1` runs them here.")
    var host: [String] = []
    @Option(help: "PostgreSQL port.") var port = 15380
    @Option(help: "Where images live: files (one folder every process shares) or s3 (the bucket FLEET_STORAGE=s3://… names, with the AWS_* variables; each image and render worker on an empty filesystem of its own).")
    var storage: ChaosStorageChoice = .files
    @Option(help: "Image (normalise) jobs in the chaos phase.") var images = 300
    @Option(help: "Garments (normalise, then cut-out) in the chaos phase.") var garments = 60
    @Option(help: "Renders in the chaos phase.") var renders = 200
    @Option(help: "Drill jobs in the chaos phase.") var drills = 3_000
    @Option(help: "Workers killed (and replaced) during the chaos phase.") var kills = 8
    @Option(help: "Drill jobs per scaling measurement; 0 skips the scaling phase.") var scalingJobs = 2_000

    struct Host {
        let name: String
        /// This machine's address as the host reaches it: PostgreSQL and the gateway listen there.
        let address: String
    }

    func run() async throws {
        let hosts = try host.map { spec -> Host in
            let parts = spec.split(separator: "=", maxSplits: 1).map(String.init)
            guard parts.count == 2 else { throw ValidationError("--host takes NAME=DBHOST, not \(spec)") }
            return Host(name: parts[0], address: parts[1])
        }
        guard !hosts.isEmpty else { throw ValidationError("give at least one --host") }
        let database = try await BenchDatabase.prepare()
        let root = NSTemporaryDirectory() + "fleet-chaos-\(getpid())"
        defer { try? FileManager.default.removeItem(atPath: root) }
        let fleetImages = try FleetImages.choose(storage, root: root, environment: ProcessInfo.processInfo.environment)
        let fleet = Fleet(hosts: hosts, port: port, databaseURL: database.url, images: fleetImages)
        defer { fleet.stopAll() }

        let scaling = scalingJobs > 0 ? try await measureScaling(fleet: fleet, database: database) : []
        let chaos = try await chaosPhase(fleet: fleet, database: database)
        if !scaling.isEmpty {
            print("scaling: drill.script jobs of 20 ms, \(Self.slotsPerWorker) at once per worker process, workers spread over \(hosts.map(\.name).joined(separator: ", "))")
            print("workers  running at once  jobs/s")
            for step in scaling { print(String(format: "%7d  %15d  %6.0f", step.workers, step.peakRunning, step.rate)) }
            print("")
        }
        print(chaos.table)
        let scales = scaling.allSatisfy { $0.peakRunning == $0.workers * Self.slotsPerWorker }
        if !scales { print("FAILED: the workers did not run \(Self.slotsPerWorker) jobs at once each") }
        if !chaos.clean || !scales { throw ExitCode.failure }
    }

    static let slotsPerWorker = 16

    struct ScalingStep {
        let workers: Int
        /// The most jobs seen running at once while every slot had a long job to hold.
        let peakRunning: Int
        let rate: Double
    }

    /// Per number of worker processes: first jobs of 3 s, two per slot, until every slot holds one
    /// (the capacity check), then drill jobs of 20 ms for the throughput.
    private func measureScaling(fleet: Fleet, database: BenchDatabase) async throws -> [ScalingStep] {
        let queue = JobQueue(executor: database.pool, knownKinds: FleetKinds.all)
        var steps: [ScalingStep] = []
        for workers in [1, 2, 4] {
            let since = try await database.pool.query("SELECT extract(epoch FROM now())::float8 AS now").rows[0].double("now")
            let started = try (0..<workers).map {
                try fleet.start("fleet-drill", index: $0, environment: ["FLEET_CONCURRENCY": "drill.script=\(Self.slotsPerWorker)"])
            }
            try await waitUntilRegistered(workers, since: since, fleet: fleet, pool: database.pool, timeout: .seconds(60))
            let slots = workers * Self.slotsPerWorker
            let long = try await queue.enqueue(Array(repeating: NewJob(kind: .drillScript, payload: #"{"sleepMs":3000}"#), count: 2 * slots)).map(\.id)
            let peak = try await peakRunning(long, expected: slots, pool: database.pool, timeout: .seconds(30))
            try await waitUntilEnded(long, pool: database.pool, timeout: .seconds(120))
            let clock = ContinuousClock.now
            let ids = try await queue.enqueue(Array(repeating: NewJob(kind: .drillScript, payload: #"{"sleepMs":20}"#), count: scalingJobs)).map(\.id)
            try await waitUntilEnded(ids, pool: database.pool, timeout: .seconds(300))
            let rate = Double(scalingJobs) / (ContinuousClock.now - clock).seconds
            progress("scaling: \(workers) worker(s): \(peak) running at once, \(Int(rate)) jobs/s")
            steps.append(ScalingStep(workers: workers, peakRunning: peak, rate: rate))
            for worker in started { fleet.stop(worker) }
        }
        return steps
    }

    /// Waits until `count` drill workers started since `since` have registered, so the capacity
    /// check measures slots and not start-up: a worker that cannot reach the database is named
    /// as such instead of showing up as missing slots.
    private func waitUntilRegistered(_ count: Int, since: Double, fleet: Fleet, pool: PostgresPool, timeout: Duration) async throws {
        let deadline = ContinuousClock.now + timeout
        var registered = 0
        while ContinuousClock.now < deadline {
            let row = try await pool.query("""
                SELECT count(*) AS n FROM workers
                WHERE executable = 'fleet-drill' AND started_at >= to_timestamp($1) AND stopped_at IS NULL
                """, [since]).rows[0]
            registered = try row.int("n")
            if registered >= count { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw BenchError("\(registered) of \(count) drill workers registered within \(timeout) (hosts \(fleet.hostNames)); see \(NSTemporaryDirectory())fleet-chaos-fleet-drill-*.log")
    }

    /// The most of `ids` seen running at once, polling until `expected` are (or the timeout).
    private func peakRunning(_ ids: [Int64], expected: Int, pool: PostgresPool, timeout: Duration) async throws -> Int {
        let deadline = ContinuousClock.now + timeout
        var peak = 0
        while ContinuousClock.now < deadline {
            let row = try await pool.query("SELECT count(*) AS n FROM jobs WHERE id = ANY($1) AND state = 'running'",
                                           [PostgresArray(ids)]).rows[0]
            peak = max(peak, try row.int("n"))
            if peak >= expected { return peak }
            try await Task.sleep(for: .milliseconds(100))
        }
        return peak
    }

    struct ChaosOutcome {
        let table: String
        let clean: Bool
    }

    private func chaosPhase(fleet: Fleet, database: BenchDatabase) async throws -> ChaosOutcome {
        let pool = database.pool
        let queue = JobQueue(executor: pool, knownKinds: FleetKinds.all)
        let storage = fleet.images.store()
        let user = try StorageID("chaos")
        let photo = try ImageNormalizer(profile: NormalizeProfile(maxWidth: 400)).normalize(path: packageRoot.appendingPathComponent("scripts/demo/garment-on-plain-background.jpg").path).jpeg
        try await storage.write(photo, to: .bodyPhoto(user: user, photo: StorageID("b1")))
        try await storage.write(photo, to: .garment(user: user, garment: StorageID("g1")))
        for index in 0..<images { try await storage.write(photo, to: .upload(user: user, upload: StorageID("u\(index)"))) }
        for index in 0..<garments { try await storage.write(photo, to: .upload(user: user, upload: StorageID("gu\(index)"))) }
        let expected = try await ChaosOutputs.expected(upload: photo, renderBody: photo, renderGarment: photo)
        try await RenderSettings(provider: LocalTryOnProvider.name, enabledCategories: Set(GarmentCategory.allCases)).save(to: pool)
        try await pool.query("INSERT INTO credits (user_id, total_granted) VALUES ('chaos', $1)", [renders])

        let executions = NSTemporaryDirectory() + "fleet-chaos-executions-\(getpid())"
        let environment = ["FLEET_LEASE_SECONDS": "3", "FLEET_RETRY_BASE_MS": "100"]
        let kinds: [(executable: String, extra: [String: String])] = [
            ("image-worker", [:]), ("render-worker", [:]),
            ("fleet-drill", ["FLEET_CONCURRENCY": "drill.script=32", "FLEET_EXECUTION_LOG": executions]),
        ]
        // The dispatcher (maintenance, and the socket the image jobs are sent through) runs here,
        // without its HTTP listener: its default port may be taken on a shared machine.
        let socket = NSTemporaryDirectory() + "fleet-chaos-\(getpid()).sock"
        _ = try fleet.start("dispatcher", index: 0, onHost: "local", environment: [
            "FLEET_DISPATCHER_TCP": "off", "FLEET_DISPATCHER_SOCKET": socket, "FLEET_HTTP_ADDRESS": "off",
        ])
        var running: [(kind: Int, process: Fleet.Worker)] = []
        for (kind, spec) in kinds.enumerated() {
            for index in 0..<2 { running.append((kind, try fleet.start(spec.executable, index: index, environment: environment.merging(spec.extra) { $1 }))) }
        }
        let client = try await connectWhenListening(socket, timeout: .seconds(60))
        let started = ContinuousClock.now
        var ids: [Int64] = []
        for index in 0..<images {
            ids.append(try await client.send(NormalizeImageRequest(userId: "chaos", uploadId: "u\(index)", target: .body, imageId: "n\(index)")).jobId)
        }
        for index in 0..<garments {
            let garment = try await client.send(ProcessGarmentRequest(userId: "chaos", uploadId: "gu\(index)", garmentId: "c\(index)"))
            ids += [garment.jobId, garment.cutoutJobId]
        }
        await client.close()
        ids += try await queue.enqueue((0..<drills).map { _ in NewJob(kind: .drillScript, payload: #"{"sleepMs":300}"#) }).map(\.id)
        let admission = RenderAdmission(pool: pool)
        let admitting = Task { await admission.run() }
        let requests = RenderRequests(pool: pool, admission: admission, deadline: .seconds(120))
        var renderIDs: [String] = []
        for index in 0..<renders {
            let render = try await requests.request(RenderRequest(
                renderID: StorageID("chaos-\(index)"), requester: .user("chaos"), ownerID: user,
                garmentID: StorageID("g1"), bodyPhotoID: StorageID("b1"), category: .tops))
            renderIDs.append(render.id.value)
            if let job = render.jobID { ids.append(job) }
        }
        admitting.cancel()

        // Kill a random worker every so often and start a replacement of the same kind elsewhere.
        var killed = 0
        while killed < kills {
            try await Task.sleep(for: .milliseconds(Int64.random(in: 300...900)))
            let victim = Int.random(in: 0..<running.count)
            fleet.kill(running[victim].process)
            let kind = running[victim].kind
            running[victim] = (kind, try fleet.start(kinds[kind].executable, index: Int.random(in: 0..<100),
                                                     environment: environment.merging(kinds[kind].extra) { $1 }))
            killed += 1
            progress("chaos: killed \(kinds[kind].executable) (\(killed)/\(kills))")
        }
        try await waitUntilEnded(ids, pool: pool, timeout: .seconds(600))
        let seconds = (ContinuousClock.now - started).seconds
        let isolated = running.filter { FleetImages.isolatedExecutables.contains(kinds[$0.kind].executable) }.map(\.process.pid)
        let scratches = fleet.images.privateScratches(of: isolated)

        let jobs = try await pool.query("""
            SELECT kind, count(*) FILTER (WHERE state = 'completed') AS completed, count(*) FILTER (WHERE state <> 'completed') AS other,
                   count(*) FILTER (WHERE attempt > 1) AS rerun
            FROM jobs WHERE id = ANY($1) GROUP BY kind ORDER BY kind
            """, [PostgresArray(ids)]).rows
        let renderRows = try await pool.query("""
            SELECT count(*) FILTER (WHERE status = 'complete') AS complete, count(*) FILTER (WHERE status <> 'complete') AS other,
                   (SELECT total_consumed FROM credits WHERE user_id = 'chaos') AS consumed,
                   (SELECT count(*) FROM credit_ledger WHERE user_id = 'chaos' AND entry = 'consume') AS ledger
            FROM renders WHERE id = ANY($1)
            """, [PostgresArray(renderIDs)]).rows[0]
        let outputs = try await checkOutputs(expected, renderIDs: renderIDs, user: user, in: storage)
        let runs = ExecutionLog.counts(executions)
        var lines = ["chaos: \(ids.count) jobs (\(images) image, \(garments) garment and its cut-out, \(renders) render, \(drills) drill) on \(fleet.hostNames), \(kills) SIGKILLs, \(String(format: "%.1f", seconds)) s",
                     "images: \(fleet.images.summary)",
                     "kind             completed  lost  rerun after a kill"]
        var clean = true
        for row in jobs {
            let other = try row.int("other")
            clean = clean && other == 0
            let kind = try row.string("kind").padding(toLength: 16, withPad: " ", startingAt: 0)
            lines.append(kind + String(format: " %9d  %4d  %d", try row.int("completed"), other, try row.int("rerun")))
        }
        let complete = try renderRows.int("complete"), consumed = try renderRows.int("consumed"), ledger = try renderRows.int("ledger")
        let outputsMatch = outputs.allSatisfy { $0.matched == $0.expected }
        let scratchLeft = fleet.images.filesLeftInScratch()
        let apart = scratches.map { $0.privateTmpfs == isolated.count && $0.namespaces == isolated.count } ?? true
        clean = clean && complete == renders && consumed == renders && ledger == renders && outputsMatch && (scratchLeft ?? 0) == 0 && apart
            && runs.count == drills && jobs.reduce(0, { $0 + ((try? $1.int("completed")) ?? 0) }) == ids.count
        lines.append("renders complete \(complete)/\(renders), credits consumed \(consumed), ledger consumes \(ledger) (duplicated: \(max(0, consumed - complete)))")
        let checked = outputs.reduce(0) { $0 + $1.matched }, looked = outputs.reduce(0) { $0 + $1.expected }
        lines.append("outputs read back and checked (decoded, expected size, byte-equal to the same pipeline here): \(checked)/\(looked): "
            + outputs.map(\.line).joined(separator: ", "))
        for problem in outputs.flatMap({ $0.problems.prefix(5) }) { lines.append("  mismatch: \(problem)") }
        if let scratches {
            lines.append("image and render workers running: \(isolated.count), each with a tmpfs of its own over its files: \(scratches.privateTmpfs), "
                + "in distinct mount namespaces: \(scratches.namespaces); files under that folder as this machine sees it: \(scratchLeft ?? 0)")
        }
        lines.append("drill jobs executed \(runs.count)/\(drills), \(runs.values.filter { $0 > 1 }.count) executed again after a kill")
        lines.append(clean ? "lost: 0, duplicated: 0, outputs checked: \(checked)" : "FAILED: something was lost, settled twice or stored wrong")
        return ChaosOutcome(table: lines.joined(separator: "\n"), clean: clean)
    }

    /// Every image output of the chaos phase, read back from the store and checked.
    private func checkOutputs(_ expected: ChaosOutputs, renderIDs: [String], user: StorageID, in storage: any ImageStorage) async throws -> [ChaosOutputs.Tally] {
        func keys(_ count: Int, _ key: (Int) throws -> StorageKey) throws -> [StorageKey] { try (0..<count).map(key) }
        return [
            await ChaosOutputs.check("body photos", keys: try keys(images) { .bodyPhoto(user: user, photo: try StorageID("n\($0)")) },
                                     against: expected.normalised, in: storage),
            await ChaosOutputs.check("garments", keys: try keys(garments) { .garment(user: user, garment: try StorageID("c\($0)")) },
                                     against: expected.normalised, in: storage),
            await ChaosOutputs.check("cut-outs", keys: try keys(garments) { .garmentCutout(user: user, garment: try StorageID("c\($0)")) },
                                     against: expected.cutout, in: storage),
            await ChaosOutputs.check("previews", keys: try keys(garments) { .garmentPreview(user: user, garment: try StorageID("c\($0)")) },
                                     against: expected.preview, in: storage),
            await ChaosOutputs.check("renders", keys: try keys(renderIDs.count) { .render(user: user, render: try StorageID(renderIDs[$0])) },
                                     against: expected.render, in: storage),
        ]
    }

    /// The dispatcher's socket once it listens (with a bucket it checks the store first).
    private func connectWhenListening(_ socket: String, timeout: Duration) async throws -> DispatcherClient {
        let deadline = ContinuousClock.now + timeout
        while true {
            do {
                return try await DispatcherClient.connect(to: .unix(path: socket))
            } catch where ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    private func waitUntilEnded(_ ids: [Int64], pool: PostgresPool, timeout: Duration) async throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let open = try await pool.query("SELECT count(*) AS n FROM jobs WHERE id = ANY($1) AND state IN ('available', 'running')",
                                            [PostgresArray(ids)]).rows[0]
            if try open.int("n") == 0 { return }
            try await Task.sleep(for: .milliseconds(200))
        }
        throw BenchError("jobs still open after \(timeout)")
    }
}


/// Starts worker processes on the hosts, round-robin by index.
final class Fleet: @unchecked Sendable {
    typealias Worker = ChildProcess
    let hosts: [ChaosRun.Host]
    let port: Int
    let databaseURL: String
    let images: FleetImages
    private var all: [ChildProcess] = []

    init(hosts: [ChaosRun.Host], port: Int, databaseURL: String, images: FleetImages) {
        self.hosts = hosts
        self.port = port
        self.databaseURL = databaseURL
        self.images = images
    }

    var hostNames: String { hosts.map(\.name).joined(separator: ", ") }

    /// Starts `executable` on host `index` (modulo the hosts), or on the host named `onHost`.
    func start(_ executable: String, index: Int, onHost: String? = nil, environment: [String: String]) throws -> ChildProcess {
        let host = hosts.first { $0.name == onHost } ?? hosts[index % hosts.count]
        let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent(executable).path
        let url = databaseURL.replacingOccurrences(of: "127.0.0.1", with: host.address)
        var env = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        env["DATABASE_URL"] = url
        images.configure(&env, for: executable, reachingThisMachineAt: host.address)
        env["FLEET_LOG_LEVEL"] = "warning"
        env["FLEET_POLL_INTERVAL_MS"] = "200"
        var arguments: [String] = []
        if executable == "fleet-drill", let log = environment["FLEET_EXECUTION_LOG"] { arguments = ["--execution-log", log] }
        let log = NSTemporaryDirectory() + "fleet-chaos-\(executable)-\(host.name).log"
        var command = images.command([binary] + arguments, for: executable)
        if host.name != "local" { command = ["/usr/sbin/ip", "netns", "exec", host.name] + command }
        let process = try ChildProcess(command[0], Array(command.dropFirst()), environment: env, outputPath: log)
        all.append(process)
        return process
    }

    func stop(_ worker: ChildProcess) { worker.signal(SIGTERM) }
    func kill(_ worker: ChildProcess) { worker.signal(SIGKILL) }
    func stopAll() { for worker in all { worker.signal(SIGTERM) } }
}
