import ArgumentParser
import FleetPostgres
import FleetSupport
import Foundation

/// `fleet-bench pooler`: the queue through PgBouncer in transaction mode against the same queue
/// direct, in the same run (docs/operations.md, "Behind PgBouncer"): drain rate of worker
/// processes and enqueue-to-start latency, with the LISTEN session direct and poll-only.
struct PoolerSuite: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pooler",
        abstract: "The queue through PgBouncer (transaction mode, unnamed statements) against direct: drain rate, start latency; LISTEN direct and poll-only.",
        discussion: """
            Starts PgBouncer with scripts/pgbouncer.sh in front of the benchmark's server, which must be on \
            127.0.0.1 (the embedded one, or DATABASE_URL on loopback). Each round measures the three ways in \
            turn, in alternating order.
            """)

    @OptionGroup var options: SuiteOptions
    @Option(help: "Jobs per drain measurement.") var drainJobs = 20_000
    @Option(help: "Worker processes per drain measurement.") var workers = 2
    @Option(help: "Single jobs sent for the latency measurement.") var latencySamples = 300
    @Option(help: "drill.noop jobs each worker process runs at once.") var workerConcurrency = 1_000
    @Option(help: "The port PgBouncer listens on.") var pgbouncerPort = 15_339
    @Option(help: "PgBouncer's default_pool_size (server connections).") var poolSize = 8
    @Option(help: "FLEET_POLL_INTERVAL_MS of the poll-only workers.") var pollIntervalMs = 1_000

    /// One way of reaching the database, measured as a queue system of its own.
    private struct Way {
        let name: String
        let bench: FleetQueueBench
    }

    func run() async throws {
        let database = try await BenchDatabase.prepare()
        guard let components = URLComponents(string: database.url), components.host == "127.0.0.1", let serverPort = components.port else {
            throw BenchError("the pooler suite needs a postgresql:// URL on 127.0.0.1 with a port: \(database.url)")
        }
        try await pgbouncer("start", "--pg-port", "\(serverPort)", "--pool-size", "\(poolSize)", "--mode", "transaction")
        var pooledComponents = components
        pooledComponents.port = pgbouncerPort
        let pooled = pooledComponents.string!
        let pooledPool = PostgresPool(conninfo: pooled, maxConnections: 4, applicationName: "fleet-bench", statements: .unnamed)
        let throughPooler = ["DATABASE_URL": pooled, "FLEET_DATABASE_STATEMENTS": "unnamed"]
        let ways = [
            Way(name: "direct", bench: FleetQueueBench(database: database, workerConcurrency: workerConcurrency)),
            Way(name: "pgbouncer", bench: FleetQueueBench(
                database: database, workerConcurrency: workerConcurrency, clientPool: pooledPool,
                workerEnvironment: throughPooler.merging(["FLEET_LISTEN_DATABASE_URL": database.url]) { $1 })),
            Way(name: "pgbouncer_poll", bench: FleetQueueBench(
                database: database, workerConcurrency: workerConcurrency, clientPool: pooledPool,
                workerEnvironment: throughPooler.merging(["FLEET_LISTEN_DATABASE_URL": "off", "FLEET_POLL_INTERVAL_MS": "\(pollIntervalMs)"]) { $1 })),
        ]
        var report = Report()
        for round in 1...max(1, options.repeats) {
            for way in round.isMultiple(of: 2) ? ways.reversed() : ways {
                progress("round \(round)/\(options.repeats): \(way.name)")
                report.add("pooler.drain_\(workers)p.\(way.name)", try await way.bench.drainRate(jobs: drainJobs, workers: workers), unit: "jobs/s")
                let latency = try await way.bench.startLatency(samples: latencySamples)
                report.add("pooler.latency_p50.\(way.name)", latency.p50, unit: "ms")
                report.add("pooler.latency_p99.\(way.name)", latency.p99, unit: "ms")
            }
        }
        try await pgbouncer("stop")
        let rows = comparisons(report)
        if options.json {
            var lines = report.medians
            for row in rows { if let ratio = row.ratio { lines.append(Measurement(metric: "pooler.\(row.name).ratio", value: ratio, unit: "x")) } }
            printJSONLines(lines)
        } else {
            printTable(title: "pooler suite: medians of \(options.repeats) rounds", peerName: "direct", rows: rows, notes: [
                "ratio: how many times better through PgBouncer than direct (throughput pooled/direct, latency direct/pooled)",
                "pgbouncer: transaction mode, default_pool_size \(poolSize), unnamed statements, LISTEN direct; poll: LISTEN off, poll every \(pollIntervalMs) ms",
                "\(workers) worker processes of \(workerConcurrency) drill.noop slots; server: \(try await database.settings())",
            ])
        }
    }

    private func comparisons(_ report: Report) -> [Comparison] {
        func row(_ measure: String, via way: String, _ unit: String, lowerIsBetter: Bool = false, target: String, _ met: (Double, Double?) -> Bool) -> Comparison {
            let pooled = report.median("pooler.\(measure).\(way)")
            let direct = report.median("pooler.\(measure).direct")
            return Comparison(name: "\(measure).\(way)", unit: unit, fleet: pooled, peer: direct, lowerIsBetter: lowerIsBetter,
                              target: target, met: pooled.map { met($0, direct) })
        }
        let drain = "drain_\(workers)p"
        return [
            row(drain, via: "pgbouncer", "jobs/s", target: ">= 0.8x direct") { pooled, direct in direct.map { pooled >= 0.8 * $0 } ?? true },
            row("latency_p50", via: "pgbouncer", "ms", lowerIsBetter: true, target: "-") { _, _ in true },
            row("latency_p99", via: "pgbouncer", "ms", lowerIsBetter: true, target: "-") { _, _ in true },
            row(drain, via: "pgbouncer_poll", "jobs/s", target: "-") { _, _ in true },
            row("latency_p50", via: "pgbouncer_poll", "ms", lowerIsBetter: true, target: "-") { _, _ in true },
            row("latency_p99", via: "pgbouncer_poll", "ms", lowerIsBetter: true, target: "-") { _, _ in true },
        ]
    }

    private func pgbouncer(_ command: String, _ arguments: String...) async throws {
        let output = NSTemporaryDirectory() + "pgbouncer-\(getpid())"
        let status = try await ChildProcess.run(
            packageRoot.appendingPathComponent("scripts/pgbouncer.sh").path, [command, "--port", "\(pgbouncerPort)"] + arguments, outputPath: output)
        guard status == 0 else { throw BenchError("scripts/pgbouncer.sh \(command) failed: \((try? String(contentsOfFile: output, encoding: .utf8)) ?? "")") }
    }
}
