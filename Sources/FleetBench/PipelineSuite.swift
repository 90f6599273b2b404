import ArgumentParser
import DrillKinds
import FleetQueue
import Foundation

/// `fleet-bench pipeline`: jobs that run after others (`docs/queue.md`, "Dependencies"). The
/// release latency on an idle fleet (the last dependency's completion to the dependent's start,
/// both the database's times), and the drain of jobs in chains against the same number of
/// independent jobs in the same run, alternating. Beside the releases, a durable commit of one WAL
/// record is timed as often: a release waits for its dependency's commit to reach the disk, so its
/// tail cannot be shorter than the disk's flush tail, measured in the same minutes.
struct PipelineSuite: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pipeline", abstract: "Dependencies: release latency, and the drain of chained jobs against independent ones.")

    @OptionGroup var options: SuiteOptions
    @Option(help: "Dependent jobs timed for the release latency, per round.") var samples = 300
    @Option(help: "Jobs per drain measurement.") var drainJobs = 20_000
    @Option(help: "Jobs per chain (each after the one before).") var chainLength = 10
    @Option(help: "Worker processes draining.") var workers = 1

    func run() async throws {
        let database = try await BenchDatabase.prepare()
        let bench = FleetQueueBench(database: database, workerConcurrency: 1_000)
        var report = Report()
        for round in 1...max(1, options.repeats) {
            progress("round \(round)/\(options.repeats): release latency, \(samples) dependents")
            let (release, commit) = try await releaseLatency(bench, database)
            report.add("pipeline.release_p50", percentile(release, 0.50), unit: "ms")
            report.add("pipeline.release_p99", percentile(release, 0.99), unit: "ms")
            report.add("pipeline.commit_p50", percentile(commit, 0.50), unit: "ms")
            report.add("pipeline.commit_p99", percentile(commit, 0.99), unit: "ms")
            // Alternating which goes first, so a drift of the machine does not favour one.
            for chained in round.isMultiple(of: 2) ? [true, false] : [false, true] {
                progress("round \(round)/\(options.repeats): drain of \(drainJobs) \(chained ? "jobs in chains of \(chainLength)" : "independent jobs")")
                let (rate, walPerJob) = try await drain(bench, database, chained: chained)
                report.add(chained ? "pipeline.drain_chained" : "pipeline.drain_independent", rate, unit: "jobs/s")
                report.add(chained ? "pipeline.wal_per_job_chained" : "pipeline.wal_per_job_independent", walPerJob, unit: "bytes")
            }
        }
        let independent = report.median("pipeline.drain_independent"), chained = report.median("pipeline.drain_chained")
        let ratio = independent.flatMap { i in chained.map { $0 / i } }
        if options.json {
            var lines = report.medians
            if let ratio { lines.append(Measurement(metric: "pipeline.drain_chained.ratio", value: ratio, unit: "x")) }
            printJSONLines(lines)
        } else {
            let p99 = report.median("pipeline.release_p99"), commitP99 = report.median("pipeline.commit_p99")
            // A release waits for a durable commit: a slow disk's tail shows in both p99s.
            let releaseMet = p99.map { $0 <= 5 }
            printTable(title: "pipeline suite: medians of \(options.repeats) rounds", peerName: "independent", rows: [
                Comparison(name: "release_p50", unit: "ms", fleet: report.median("pipeline.release_p50"), peer: nil, lowerIsBetter: true,
                           target: "-", met: nil),
                Comparison(name: "release_p99", unit: "ms", fleet: p99, peer: nil, lowerIsBetter: true,
                           target: "<= 5", met: releaseMet),
                Comparison(name: "durable_commit_p50", unit: "ms", fleet: report.median("pipeline.commit_p50"), peer: nil, lowerIsBetter: true,
                           target: "-", met: nil),
                Comparison(name: "durable_commit_p99", unit: "ms", fleet: commitP99, peer: nil, lowerIsBetter: true,
                           target: "-", met: nil),
                // A chained job is written once more than an independent one (waiting, then
                // released) and its edge deleted: about 1.4x the WAL per job (the next row) and
                // 1.6x the database's work, so about 0.6x is the most it can reach
                // (docs/benchmarks.md, "Pipeline").
                Comparison(name: "drain_chained", unit: "jobs/s", fleet: chained, peer: independent, lowerIsBetter: false,
                           target: ">= 0.5x independent", met: ratio.map { $0 >= 0.5 }),
                Comparison(name: "wal_per_job_chained", unit: "bytes", fleet: report.median("pipeline.wal_per_job_chained"),
                           peer: report.median("pipeline.wal_per_job_independent"), lowerIsBetter: true, target: "-", met: nil),
            ], notes: [
                "release: drill.noop after one drill.noop, one worker process idle otherwise; the dependent's started_at minus its dependency's finished_at (the database's clock), one pair every 15 ms",
                "durable commit: one WAL record committed (pg_logical_emit_message), timed by the client, one after each pair; a release includes one",
                "drain: \(drainJobs) drill.noop jobs, \(workers) worker process(es); chained: \(drainJobs / chainLength) chains of \(chainLength), each job after the one before; enqueued while the kind is paused, timed from the resume",
                "server: \(try await database.settings())",
            ])
        }
    }

    /// Milliseconds from a dependency's completion to its dependent's start, and of the durable
    /// commits timed between them.
    private func releaseLatency(_ bench: FleetQueueBench, _ database: BenchDatabase) async throws -> (releases: [Double], commits: [Double]) {
        try await bench.reset()
        let processes = try await bench.startWorkers(1)
        defer { processes.forEach { $0.signal(SIGKILL) } }
        var commits: [Double] = []
        // The pair in one graph, one transaction: enqueued one after the other, a dependency that
        // ended before the dependent's enqueue committed waited for that commit inside its own
        // completion, whose `finished_at` (its transaction's start) then counted the wait.
        let pair = try JobGraph([
            JobGraph.Node(name: "dependency", job: NewJob(kind: .drillNoop)),
            JobGraph.Node(name: "dependent", job: NewJob(kind: .drillNoop), runsAfter: ["dependency"]),
        ])
        for _ in 0..<samples {
            _ = try await bench.queue.enqueue(pair)
            try await Task.sleep(for: .milliseconds(10))
            let committing = ContinuousClock.now
            // Transactional: the message waits for the commit, and the commit for the disk.
            _ = try await database.pool.query("SELECT pg_logical_emit_message(true, 'fleet-bench', 'commit probe')")
            commits.append((ContinuousClock.now - committing) / .milliseconds(1))
            try await Task.sleep(for: .milliseconds(5))
        }
        try await waitForCompleted(database, 2 * samples, timeout: .seconds(60))
        try await bench.stop(processes)
        let latencies = try await database.pool.query("""
            SELECT extract(epoch FROM j.started_at - d.finished_at) * 1000 AS ms
            FROM jobs j JOIN jobs d ON d.id = j.depends_on[1] ORDER BY 1
            """).rows.map { try $0.double("ms") }
        guard latencies.count == samples else { throw BenchError("\(latencies.count) of \(samples) dependents ran") }
        return (latencies, commits.sorted())
    }

    /// Jobs per second drained (enqueued while their kind is paused, timed from the resume), and
    /// the WAL the drain wrote per job: what the database wrote for each, released or not.
    private func drain(_ bench: FleetQueueBench, _ database: BenchDatabase, chained: Bool) async throws -> (rate: Double, walPerJob: Double) {
        try await bench.reset()
        let control = bench.queue.control()
        _ = try await control.pause(.kind(.drillNoop), actor: "fleet-bench")
        let processes = try await bench.startWorkers(workers)
        defer { processes.forEach { $0.signal(SIGKILL) } }
        if chained {
            // Link by link: each link's jobs after the previous link's, one batch per link.
            var previous: [Int64] = []
            for _ in 0..<chainLength {
                let link = (0..<(drainJobs / chainLength)).map { index in
                    var job = NewJob(kind: .drillNoop)
                    if !previous.isEmpty { job.after = [previous[index]] }
                    return job
                }
                previous = try await bench.queue.enqueue(link).map(\.id)
            }
        } else {
            _ = try await bench.queue.enqueue(Array(repeating: NewJob(kind: .drillNoop), count: drainJobs))
        }
        try await database.pool.query("VACUUM ANALYZE jobs")
        let walBefore = try await database.pool.query("SELECT pg_current_wal_lsn()::text AS lsn").rows[0].string("lsn")
        let started = ContinuousClock.now
        _ = try await control.resume(.kind(.drillNoop), actor: "fleet-bench")
        try await waitForCompleted(database, drainJobs, timeout: .seconds(300))
        let elapsed = ContinuousClock.now - started
        let wal = try await database.pool.query(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::float8 AS bytes", [walBefore]).rows[0].double("bytes")
        try await bench.stop(processes)
        return (Double(drainJobs) / elapsed.seconds, wal / Double(drainJobs))
    }

    /// Polls the jobs not ended yet through the partial indexes of their states, every 25 ms:
    /// counting the completed ones every 5 ms scanned the table, 4 ms each, and took half a core
    /// from the database whose drain is measured (the poll still costs about 3 ms; a drain's
    /// time is known to within 25 ms, about 1 %). Once none is left, the completed ones are
    /// counted once: a job that ended otherwise makes the measurement fail, not look fast.
    private func waitForCompleted(_ database: BenchDatabase, _ count: Int, timeout: Duration) async throws {
        let deadline = ContinuousClock.now + timeout
        let pending = """
            SELECT (SELECT count(*) FROM jobs WHERE state = 'waiting') + (SELECT count(*) FROM jobs WHERE state = 'available')
                 + (SELECT count(*) FROM jobs WHERE state = 'running') AS n
            """
        while try await database.pool.query(pending).rows[0].int("n") > 0 {
            guard ContinuousClock.now < deadline else { throw BenchError("\(count) jobs did not complete in time") }
            try await Task.sleep(for: .milliseconds(25))
        }
        let completed = try await database.pool.query("SELECT count(*) AS n FROM jobs WHERE state = 'completed'").rows[0].int("n")
        guard completed == count else { throw BenchError("\(completed) of \(count) jobs completed; the others ended otherwise") }
    }
}
