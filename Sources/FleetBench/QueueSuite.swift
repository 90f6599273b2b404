import ArgumentParser
import DispatcherCore
import DrillKinds
import FleetPostgres
import FleetQueue
import FleetSupport
import Foundation

/// `fleet-bench queue`: batched enqueue rate, drain rate of no-op jobs with 1 and 2 worker
/// processes, enqueue-to-start latency of single jobs on idle workers — for the fleet and
/// for pgqueuer, on the same database server, in the same run.
struct QueueSuite: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "queue", abstract: "The queue against pgqueuer: enqueue rate, drain rate, start latency.")

    @OptionGroup var options: SuiteOptions
    @Option(help: "Jobs per drain measurement.") var drainJobs = 20_000
    @Option(help: "Jobs per enqueue measurement.") var enqueueJobs = 100_000
    @Option(help: "Jobs per enqueue statement.") var batch = 5_000
    @Option(help: "Single jobs sent for the latency measurement.") var latencySamples = 300
    @Option(help: "drill.noop jobs each fleet worker process runs at once.") var workerConcurrency = 1_000
    @Flag(help: "Measure the fleet only, not pgqueuer.") var skipPeers = false
    @Option(help: """
        The drained jobs carry a traceparent, as if each was enqueued in a request's trace, and this fraction of them is \
        sampled (with tracing on in the workers, the rest run untraced). Without it they carry none, and each starts a \
        new trace at its worker, where the workers' sampler decides.
        """)
    var sampledTraceParents: Double?

    func run() async throws {
        let database = try await BenchDatabase.prepare()
        var fleet = FleetQueueBench(database: database, workerConcurrency: workerConcurrency)
        fleet.sampledTraceParents = sampledTraceParents
        let peer = skipPeers ? nil : try await PgqueuerPeer.prepare(databaseURL: database.url)
        var systems: [(name: String, system: any QueueSystem)] = [("fleet", fleet)]
        if let peer { systems.append(("pgqueuer", peer)) }
        var report = Report()
        for round in 1...max(1, options.repeats) {
            for (name, system) in systems {
                progress("round \(round)/\(options.repeats): \(name)")
                report.add("queue.enqueue.\(name)", try await system.enqueueRate(jobs: enqueueJobs, batch: batch), unit: "jobs/s")
                for workers in [1, 2] {
                    report.add("queue.drain_\(workers)p.\(name)", try await system.drainRate(jobs: drainJobs, workers: workers), unit: "jobs/s")
                }
                let latency = try await system.startLatency(samples: latencySamples)
                report.add("queue.latency_p50.\(name)", latency.p50, unit: "ms")
                report.add("queue.latency_p99.\(name)", latency.p99, unit: "ms")
            }
        }
        let rows = comparisons(report)
        if options.json {
            var lines = report.medians
            for row in rows { if let ratio = row.ratio { lines.append(Measurement(metric: "queue.\(row.name).ratio", value: ratio, unit: "x")) } }
            printJSONLines(lines)
        } else {
            printTable(title: "queue suite: medians of \(options.repeats) runs", peerName: "pgqueuer", rows: rows, notes: [
                "ratio: how many times better the fleet is (throughput fleet/peer, latency peer/fleet)",
                "server: \(try await database.settings())",
                "fleet: \(workerConcurrency) drill.noop slots per worker process; pgqueuer: \(peer?.settingsNote ?? "not run")",
            ])
        }
    }

    private func comparisons(_ report: Report) -> [Comparison] {
        func row(_ name: String, _ unit: String, lowerIsBetter: Bool = false, target: String,
                 _ met: (Double, Double?) -> Bool) -> Comparison {
            let fleet = report.median("queue.\(name).fleet")
            let peer = report.median("queue.\(name).pgqueuer")
            return Comparison(name: name, unit: unit, fleet: fleet, peer: peer, lowerIsBetter: lowerIsBetter,
                              target: target, met: fleet.map { met($0, peer) })
        }
        return [
            row("enqueue", "jobs/s", target: ">= 2x pgqueuer") { fleet, peer in peer.map { fleet >= 2 * $0 } ?? true },
            row("drain_1p", "jobs/s", target: "-") { _, _ in true },
            row("drain_2p", "jobs/s", target: ">= 2x pgqueuer, >= 12000") { fleet, peer in fleet >= 12_000 && (peer.map { fleet >= 2 * $0 } ?? true) },
            row("latency_p50", "ms", lowerIsBetter: true, target: "-") { _, _ in true },
            row("latency_p99", "ms", lowerIsBetter: true, target: "<= pgqueuer, < 5") { fleet, peer in fleet < 5 && (peer.map { fleet <= $0 } ?? true) },
        ]
    }
}

/// A queue measured by the suite: the fleet or a peer.
protocol QueueSystem {
    /// Jobs per second enqueued in statements of `batch`.
    func enqueueRate(jobs: Int, batch: Int) async throws -> Double
    /// Jobs per second drained by `workers` idle worker processes, from the enqueue's commit.
    func drainRate(jobs: Int, workers: Int) async throws -> Double
    /// Milliseconds from just before enqueueing one job to its handler starting.
    func startLatency(samples: Int) async throws -> (p50: Double, p99: Double)
}

/// The fleet's side of the queue suite.
struct FleetQueueBench: QueueSystem {
    let database: BenchDatabase
    let workerConcurrency: Int
    /// Where the measured enqueues go (nil: `database.pool`); the suite's own bookkeeping always
    /// goes to `database.pool`.
    var clientPool: PostgresPool? = nil
    /// The worker processes' environment on top of `DATABASE_URL` = `database.url`.
    var workerEnvironment: [String: String] = [:]
    /// The drained jobs' traceparents: this fraction sampled (nil: none, `QueueSuite`).
    var sampledTraceParents: Double? = nil
    var queue: JobQueue { JobQueue(executor: clientPool ?? database.pool, knownKinds: FleetKinds.all) }

    func enqueueRate(jobs: Int, batch: Int) async throws -> Double {
        try await reset()
        let started = ContinuousClock.now
        var sent = 0
        while sent < jobs {
            let count = min(batch, jobs - sent)
            _ = try await queue.enqueue(Array(repeating: NewJob(kind: .drillNoop), count: count))
            sent += count
        }
        return Double(jobs) / (ContinuousClock.now - started).seconds
    }

    func drainRate(jobs: Int, workers: Int) async throws -> Double {
        try await reset()
        let processes = try await startWorkers(workers)
        defer { processes.forEach { $0.signal(SIGKILL) } }
        _ = try await queue.enqueue((0..<jobs).map { _ in
            var job = NewJob(kind: .drillNoop)
            job.traceParent = sampledTraceParents.map { Self.traceParent(sampled: Double.random(in: 0..<1) < $0) }
            return job
        })
        let started = ContinuousClock.now
        try await waitForEmptyQueue(timeout: .seconds(300))
        let elapsed = ContinuousClock.now - started
        try await stop(processes)
        let completed = try await database.pool.query("SELECT count(*) AS n FROM jobs WHERE state = 'completed'").rows[0].int("n")
        guard completed == jobs else { throw BenchError("drain finished with \(completed) of \(jobs) jobs completed") }
        return Double(jobs) / elapsed.seconds
    }

    /// A W3C traceparent of a new trace, its sampled flag set or not.
    static func traceParent(sampled: Bool) -> String {
        func hex(_ value: UInt64) -> String {
            let digits = String(value, radix: 16)
            return String(repeating: "0", count: 16 - digits.count) + digits
        }
        let trace = hex(.random(in: 1...UInt64.max)) + hex(.random(in: 0...UInt64.max))
        return "00-\(trace)-\(hex(.random(in: 1...UInt64.max)))-\(sampled ? "01" : "00")"
    }

    /// Milliseconds from just before `enqueue` to the handler starting, on an idle worker.
    func startLatency(samples: Int) async throws -> (p50: Double, p99: Double) {
        try await reset()
        let processes = try await startWorkers(1)
        defer { processes.forEach { $0.signal(SIGKILL) } }
        for _ in 0..<samples {
            _ = try await queue.enqueue(NewJob(kind: .drillNoop, payload: "{\"sentAtNs\":\(wallClockNanoseconds())}"))
            try await Task.sleep(for: .milliseconds(15))
        }
        try await waitForEmptyQueue(timeout: .seconds(60))
        try await stop(processes)
        let latencies = try await database.pool.query(
            "SELECT (result->>'startLatencyNs')::float8 / 1e6 AS ms FROM jobs ORDER BY 1").rows.map { try $0.double("ms") }
        guard !latencies.isEmpty else { throw BenchError("no latency samples recorded") }
        return (percentile(latencies, 0.50), percentile(latencies, 0.99))
    }

    func reset() async throws {
        try await database.pool.query("TRUNCATE jobs, workers")
        try await database.pool.query("VACUUM ANALYZE jobs")
    }

    /// Starts drill workers and waits until each has registered and is listening.
    func startWorkers(_ count: Int) async throws -> [ChildProcess] {
        var environment = ProcessInfo.processInfo.environment
        environment["DATABASE_URL"] = database.url
        environment["FLEET_LOG_LEVEL"] = "warning"
        environment["FLEET_CONCURRENCY"] = "drill.noop=\(workerConcurrency)"
        environment.merge(workerEnvironment) { $1 }
        let processes = try (0..<count).map { _ in
            try ChildProcess("/proc/self/exe", ["worker"], environment: environment, outputPath: NSTemporaryDirectory() + "fleet-bench-worker.log")
        }
        let deadline = ContinuousClock.now + .seconds(30)
        while try await database.pool.query("SELECT count(*) AS n FROM workers WHERE stopped_at IS NULL").rows[0].int("n") < count {
            guard ContinuousClock.now < deadline else { throw BenchError("workers did not start") }
            try await Task.sleep(for: .milliseconds(20))
        }
        // Registration comes just before LISTEN connects (when there is one): give it a moment.
        try await Task.sleep(for: .milliseconds(300))
        return processes
    }

    func stop(_ processes: [ChildProcess]) async throws {
        processes.forEach { $0.signal(SIGTERM) }
        for process in processes { _ = await process.wait(timeout: .seconds(30)) }
    }

    /// No job left to run or being run: both checks read the small partial indexes.
    private func waitForEmptyQueue(timeout: Duration) async throws {
        let deadline = ContinuousClock.now + timeout
        while try await database.pool.query("""
            SELECT EXISTS (SELECT 1 FROM jobs WHERE state = 'available') OR EXISTS (SELECT 1 FROM jobs WHERE state = 'running') AS busy
            """).rows[0].bool("busy") {
            guard ContinuousClock.now < deadline else { throw BenchError("queue did not drain in time") }
            try await Task.sleep(for: .milliseconds(5))
        }
    }
}

func percentile(_ sorted: [Double], _ fraction: Double) -> Double {
    sorted[min(sorted.count - 1, Int((Double(sorted.count - 1) * fraction).rounded()))]
}
