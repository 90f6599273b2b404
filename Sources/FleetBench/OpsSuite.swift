import ArgumentParser
import DispatcherCore
import DrillKinds
import FleetQueue
import Foundation

/// `fleet-bench ops`: job control on a big table. `jobs.list` pages on 1,000,000 jobs, a bulk
/// retry of 100,000 dead jobs, and a worker's drain rate of another kind while that retry runs,
/// against the same drain alone in the same run (the operator's action must not starve workers).
struct OpsSuite: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ops", abstract: "Job control on 1,000,000 jobs: list latency, bulk retry rate, drain beside it.")

    @OptionGroup var options: SuiteOptions
    @Option(help: "Jobs in the table.") var tableJobs = 1_000_000
    @Option(help: "Dead jobs the bulk retry puts back.") var retryJobs = 100_000
    @Option(help: "drill.noop jobs per drain measurement.") var drainJobs = 20_000
    @Option(help: "jobs.list calls per filter and round.") var listSamples = 100

    /// The filters an operator pages through, by name.
    static let filters: [(String, JobFilter)] = [
        ("dead", JobFilter(states: [.dead])),
        ("dead_of_kind", JobFilter(states: [.dead], kinds: ["garment.cutout"])),
        ("dead_by_code", JobFilter(states: [.dead], errorCode: "PROVIDER_DOWN")),
        ("kind", JobFilter(kinds: ["render.run"])),
        ("dead_last_hour", JobFilter(states: [.dead], finishedAfter: Date().addingTimeInterval(-3600))),
        ("completed_of_kind", JobFilter(states: [.completed], kinds: ["image.normalize"])),
        ("completed", JobFilter(states: [.completed])),
    ]

    /// Milliseconds per `jobs.list` call of `filter`, `samples` calls: every fifth from the top,
    /// the others following the cursor of the page before, as a person paging does.
    static func listLatencies(_ control: JobControl, _ filter: JobFilter, samples: Int) async throws -> [Double] {
        var latencies: [Double] = []
        var cursor: Int64?
        for sample in 0..<samples {
            let started = ContinuousClock.now
            let page = try await control.list(filter, before: sample % 5 == 0 ? nil : cursor, limit: 50)
            latencies.append((ContinuousClock.now - started).seconds * 1000)
            cursor = page.last?.id
        }
        return latencies
    }

    func run() async throws {
        let database = try await BenchDatabase.prepare()
        let bench = FleetQueueBench(database: database, workerConcurrency: 1_000)
        let control = JobControl(executor: database.pool)
        try await bench.reset()
        progress("filling \(tableJobs) jobs")
        try await Self.fill(database, jobs: tableJobs)
        var report = Report()
        for round in 1...max(1, options.repeats) {
            // The retry targets dead again (the previous round put them back) and the table
            // vacuumed: pages are measured on a settled table. (Right after a bulk retry, until
            // autovacuum passes, a page also steps over the retried rows' old index entries.)
            try await killRetryTargets(database)
            progress("round \(round)/\(options.repeats): jobs.list")
            var latencies: [Double] = []
            for (name, filter) in Self.filters {
                let mine = try await Self.listLatencies(control, filter, samples: listSamples)
                report.add("ops.list_p99.\(name)", percentile(mine.sorted(), 0.99), unit: "ms")
                latencies += mine
            }
            latencies.sort()
            report.add("ops.list_p50", percentile(latencies, 0.50), unit: "ms")
            report.add("ops.list_p99", percentile(latencies, 0.99), unit: "ms")

            progress("round \(round)/\(options.repeats): drain alone")
            report.add("ops.drain_alone", try await drain(bench, database, beside: nil).drainRate, unit: "jobs/s")
            progress("round \(round)/\(options.repeats): drain beside a bulk retry of \(retryJobs)")
            let (drainRate, retryRate) = try await drain(bench, database) {
                let started = ContinuousClock.now
                let count = try await control.retryMany(JobFilter(kinds: ["image.normalize"], errorCode: "PROVIDER_DOWN"),
                                                        limit: retryJobs, dryRun: false, actor: "fleet-bench").retried
                guard count == retryJobs else { throw BenchError("bulk retry put back \(count) of \(retryJobs)") }
                return Double(count) / (ContinuousClock.now - started).seconds
            }
            report.add("ops.drain_beside_retry", drainRate, unit: "jobs/s")
            report.add("ops.bulk_retry", retryRate ?? 0, unit: "rows/s")
        }
        let alone = report.median("ops.drain_alone"), beside = report.median("ops.drain_beside_retry")
        let ratio = alone.flatMap { a in beside.map { $0 / a } }
        if options.json {
            var lines = report.medians
            if let ratio { lines.append(Measurement(metric: "ops.drain_beside_retry.ratio", value: ratio, unit: "x")) }
            printJSONLines(lines)
        } else {
            let p99 = report.median("ops.list_p99")
            printTable(title: "ops suite: medians of \(options.repeats) runs on \(tableJobs) jobs", peerName: "alone", rows: [
                Comparison(name: "list_p50", unit: "ms", fleet: report.median("ops.list_p50"), peer: nil, lowerIsBetter: true, target: "-", met: nil),
                Comparison(name: "list_p99", unit: "ms", fleet: p99, peer: nil, lowerIsBetter: true, target: "<= 20", met: p99.map { $0 <= 20 }),
                Comparison(name: "bulk_retry", unit: "rows/s", fleet: report.median("ops.bulk_retry"), peer: nil, lowerIsBetter: false, target: "-", met: nil),
                Comparison(name: "drain_beside_retry", unit: "jobs/s", fleet: beside, peer: alone, lowerIsBetter: false,
                           target: ">= 0.8x alone", met: ratio.map { $0 >= 0.8 }),
            ] + Self.filters.map { name, _ in
                Comparison(name: "list_p99 \(name)", unit: "ms", fleet: report.median("ops.list_p99.\(name)"), peer: nil,
                           lowerIsBetter: true, target: "-", met: nil)
            }, notes: [
                "jobs.list: a page of 50 through JobControl (one statement, planned per call), \(listSamples) calls per filter, every fifth from the top, the others the next page",
                "drain: \(drainJobs) drill.noop jobs, 1 worker process; beside: while \(retryJobs) dead image.normalize jobs are retried in batches",
                "server: \(try await database.settings())",
            ])
        }
    }

    /// A table as an operator meets it after a week: mostly completed, some dead with a few
    /// codes, some cancelled and queued, over several kinds, finished over seven days; the
    /// finished jobs' count changes its insert recorded folded.
    /// (The console suite measures its pages on the same table.)
    static func fill(_ database: BenchDatabase, jobs tableJobs: Int) async throws {
        try await database.pool.query("""
            INSERT INTO jobs (kind, state, attempt, max_attempts, created_at, finished_at, errors, last_error_code, run_at)
            SELECT (ARRAY['image.normalize', 'garment.cutout', 'render.run', 'account.purge'])[1 + i % 4],
                s.state::job_state, 1, 1, f - interval '1 minute', CASE WHEN s.state = 'available' THEN NULL ELSE f END,
                CASE WHEN s.state = 'dead' THEN jsonb_build_array(jsonb_build_object('attempt', 1, 'at', f, 'error', 'failed',
                    'code', c.code)) ELSE '[]' END,
                CASE WHEN s.state = 'dead' THEN c.code END,
                now() + interval '1 day'
            FROM generate_series(1, $1) AS i,
                LATERAL (SELECT now() - make_interval(secs => ($1 - i) * 604800.0 / $1) AS f) AS t,
                LATERAL (SELECT (ARRAY['PROVIDER_DOWN', 'IMAGE_INVALID', 'LEASE_EXPIRED'])[1 + i % 3] AS code) AS c,
                LATERAL (SELECT CASE WHEN i % 100 < 6 THEN 'dead' WHEN i % 100 < 8 THEN 'cancelled'
                                     WHEN i % 100 < 10 THEN 'available' ELSE 'completed' END AS state) AS s
            """, [tableJobs])
        // As the dispatcher's `counts.fold` task does every few seconds; then the changes' table
        // vacuumed, as autovacuum would within a minute (`LargeTableSuite.fill`).
        _ = try await JobCountFolder(executor: database.pool).runOnce()
        try await database.pool.query("VACUUM job_count_changes")
    }

    /// `retryJobs` dead image.normalize jobs that died of PROVIDER_DOWN, ready to be retried
    /// (again, each round: the previous retry made them available).
    private func killRetryTargets(_ database: BenchDatabase) async throws {
        try await database.pool.query("DELETE FROM jobs WHERE kind = 'image.normalize' AND last_error_code = 'PROVIDER_DOWN'")
        try await database.pool.query("""
            INSERT INTO jobs (kind, state, attempt, max_attempts, finished_at, errors, last_error_code)
            SELECT 'image.normalize', 'dead', 1, 1, now(),
                '[{"attempt": 1, "at": "2026-11-24T00:00:00Z", "error": "provider down", "code": "PROVIDER_DOWN"}]', 'PROVIDER_DOWN'
            FROM generate_series(1, $1)
            """, [retryJobs])
        try await database.pool.query("VACUUM ANALYZE jobs")
        // As the dispatcher's `counts.fold` task does every few seconds; then the changes' table
        // vacuumed, as autovacuum would within a minute (`LargeTableSuite.fill`).
        _ = try await JobCountFolder(executor: database.pool).runOnce()
        try await database.pool.query("VACUUM job_count_changes")
    }

    /// drill.noop jobs per second drained by one worker process, with `beside` running from the
    /// enqueue's commit on, and what `beside` returned.
    private func drain(
        _ bench: FleetQueueBench, _ database: BenchDatabase, beside: (@Sendable () async throws -> Double)?
    ) async throws -> (drainRate: Double, beside: Double?) {
        try await database.pool.query("DELETE FROM jobs WHERE kind = 'drill.noop'")
        let processes = try await bench.startWorkers(1)
        defer { processes.forEach { $0.signal(SIGKILL) } }
        _ = try await bench.queue.enqueue(Array(repeating: NewJob(kind: .drillNoop), count: drainJobs))
        let started = ContinuousClock.now
        async let alongside = beside?()
        let deadline = started + .seconds(300)
        while try await database.pool.query(
            "SELECT count(*) AS n FROM jobs WHERE kind = 'drill.noop' AND state = 'completed'").rows[0].int("n") < drainJobs {
            guard ContinuousClock.now < deadline else { throw BenchError("the drain did not finish in time") }
            try await Task.sleep(for: .milliseconds(5))
        }
        let elapsed = ContinuousClock.now - started
        let besideResult = try await alongside
        try await bench.stop(processes)
        return (Double(drainJobs) / elapsed.seconds, besideResult)
    }
}
