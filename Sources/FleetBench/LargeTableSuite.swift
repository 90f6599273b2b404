import ArgumentParser
import DispatcherCore
import DrillKinds
import FleetPostgres
import FleetQueue
import Foundation
import Logging
import Synchronization

/// `fleet-bench large`: what a big `jobs` table costs. A fleet running 200 jobs/s keeps some
/// 17 million finished rows for a day; here the queue (enqueue, drain, enqueue-to-start) and the
/// operators' reads (`stats`, `jobs.list` per filter, every console page) are measured on a table
/// of `--table-jobs` finished jobs against a nearly empty one (1,000 jobs of the same mix, so the
/// pages have something to show) in the same run; then `--prune-jobs` rows past their retention
/// are pruned, as the dispatcher's pruner does, while a worker takes jobs, and the
/// enqueue-to-start latency during the prune is set against the same without it.
struct LargeTableSuite: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "large",
        abstract: "The queue and the operators' reads on 10,000,000 finished jobs against a nearly empty table; a prune of 1,000,000 rows while a worker takes jobs.")

    @OptionGroup var options: SuiteOptions
    @Option(help: "Finished jobs in the large table.") var tableJobs = 10_000_000
    @Option(help: "Rows past their retention the prune deletes (the table holds at least this many).") var pruneJobs = 1_000_000
    @Option(help: "drill.noop jobs per enqueue measurement (batches of 1,000).") var enqueueJobs = 50_000
    @Option(help: "drill.noop jobs per drain measurement.") var drainJobs = 20_000
    @Option(help: "Jobs per enqueue-to-start measurement, one at a time (the p99 of 200 is the second slowest: it moved by a third from run to run).") var latencySamples = 1_000
    @Option(help: "Calls per read (stats, each jobs.list filter, each console page) and round.") var readSamples = 30
    @Option(help: "Rows the prune deletes per statement (the pruner's default).") var pruneBatch = Pruner.defaultBatch
    @Flag(help: "Vacuum jobs' indexes before each enqueue-to-start measurement: the claim then skips no dead entries left by the round's enqueues and drain (docs/queue.md, \"A large table\").") var cleanClaimIndex = false

    static let smallTable = 1_000

    func run() async throws {
        let database = try await BenchDatabase.prepare()
        let bench = FleetQueueBench(database: database, workerConcurrency: 1_000)
        try await bench.reset()
        try await Self.fill(database, jobs: Self.smallTable, pruneable: 0)
        try await settle(database)
        let console = try await ConsoleUnderTest.start(database)
        defer { console.stop() }
        var report = Report()
        for round in 1...max(1, options.repeats) {
            try await measure(as: "small", round: round, bench: bench, console: console, into: &report)
        }
        progress("filling \(tableJobs) finished jobs, \(pruneJobs) of them past their retention")
        try await Self.fill(database, jobs: tableJobs, pruneable: pruneJobs)
        try await settle(database)
        for round in 1...max(1, options.repeats) {
            try await measure(as: "large", round: round, bench: bench, console: console, into: &report)
        }
        try await measurePrune(bench: bench, database: database, into: &report)
        await console.shutdown()
        let size = try await database.pool.query(
            "SELECT pg_total_relation_size('jobs') AS total, pg_relation_size('jobs') AS heap").rows[0]
        try await printReport(report, tableBytes: size.int64("total"), heapBytes: size.int64("heap"), database: database)
    }

    /// The table vacuumed and analysed, and its writes checkpointed: after a fill of millions of
    /// rows, a checkpoint spread over minutes would otherwise still be writing them to the disk
    /// while the large table's rounds flush their commits, which the small table's never met.
    private func settle(_ database: BenchDatabase) async throws {
        try await database.pool.query("VACUUM ANALYZE jobs")
        try await database.pool.query("CHECKPOINT")
    }

    /// The queue's rates and latencies and the operators' reads, each a median-ready sample under
    /// `"<table>.<metric>"`. The drill jobs it adds are deleted again, so each round starts alike.
    private func measure(as table: String, round: Int, bench: FleetQueueBench, console: ConsoleUnderTest, into report: inout Report) async throws {
        let pool = bench.database.pool
        progress("\(table) table, round \(round)/\(options.repeats): enqueue, drain, enqueue-to-start")
        let first = try await nextJobID(pool)
        let enqueueStarted = ContinuousClock.now
        for sent in stride(from: 0, to: enqueueJobs, by: 1_000) {
            _ = try await bench.queue.enqueue(Array(repeating: NewJob(kind: .drillNoop), count: min(1_000, enqueueJobs - sent)))
        }
        report.add("\(table).enqueue", Double(enqueueJobs) / (ContinuousClock.now - enqueueStarted).seconds, unit: "jobs/s")
        try await deleteDrillJobs(from: first, pool)
        report.add("\(table).drain", try await drainRate(bench), unit: "jobs/s")
        // The round's enqueues and drain left some 70,000 dead entries in the claim index; a large
        // table's autovacuum waits for more dead rows than that, and even then may skip the indexes.
        if cleanClaimIndex { _ = try await pool.query("VACUUM (INDEX_CLEANUP ON) jobs") }
        let latency = try await startLatencies(bench)
        report.add("\(table).start_p50", latency.p50, unit: "ms")
        report.add("\(table).start_p99", latency.p99, unit: "ms")

        progress("\(table) table, round \(round)/\(options.repeats): stats, jobs.list, console pages")
        let queue = bench.queue
        // The drill jobs' endings and deletes folded, as the dispatcher's `counts.fold` task does
        // every few seconds.
        _ = try await JobCountFolder(executor: pool).runOnce()
        report.add("\(table).stats_p99", try await p99 { _ = try await queue.stats(window: .seconds(3_600)) }, unit: "ms")
        let control = queue.control()
        for (name, filter) in OpsSuite.filters {
            let latencies = try await OpsSuite.listLatencies(control, filter, samples: readSamples)
            report.add("\(table).list_p99.\(name)", percentile(latencies.sorted(), 0.99), unit: "ms")
        }
        for (name, path) in try await console.pages() {
            report.add("\(table).page_p99.\(name)", try await p99 { try await console.browser.get(path) }, unit: "ms")
        }
    }

    /// The prune of `pruneJobs` rows by the dispatcher's pruner (in batches of `pruneBatch`), while
    /// enqueue-to-start is measured beside it from its start to its end; then the same latency
    /// without it.
    private func measurePrune(bench: FleetQueueBench, database: BenchDatabase, into report: inout Report) async throws {
        progress("pruning \(pruneJobs) rows while a worker takes jobs")
        let pruner = Pruner(executor: database.pool, logger: Logger(label: "fleet-bench"))
        let target = pruneJobs
        let beside = try await startLatencies(bench, beside: {
            let started = ContinuousClock.now
            let deleted = try await pruner.runOnce(batch: pruneBatch)
            return (deleted, (ContinuousClock.now - started).seconds)
        })
        guard let (deleted, seconds) = beside.alongside, deleted == target else {
            throw BenchError("the prune deleted \(beside.alongside?.0 ?? 0) of \(target) rows")
        }
        report.add("prune.rate", Double(deleted) / seconds, unit: "rows/s")
        report.add("prune.start_p99_during", beside.p99, unit: "ms")
        report.add("prune.start_p99_after", try await startLatencies(bench).p99, unit: "ms")
    }

    private func p99(_ call: () async throws -> Void) async throws -> Double {
        var latencies: [Double] = []
        for _ in 0..<readSamples {
            let started = ContinuousClock.now
            try await call()
            latencies.append((ContinuousClock.now - started).seconds * 1000)
        }
        return percentile(latencies.sorted(), 0.99)
    }

    private func nextJobID(_ pool: PostgresPool) async throws -> Int64 {
        try await pool.query("SELECT coalesce(max(id), 0) + 1 AS id FROM jobs").rows[0].int64("id")
    }

    private func deleteDrillJobs(from first: Int64, _ pool: PostgresPool) async throws {
        try await pool.query("DELETE FROM jobs WHERE id >= $1 AND kind = 'drill.noop'", [first])
    }

    /// drill.noop jobs per second drained by one worker process, from the enqueue's commit.
    private func drainRate(_ bench: FleetQueueBench) async throws -> Double {
        let pool = bench.database.pool
        let first = try await nextJobID(pool)
        let processes = try await bench.startWorkers(1)
        defer { processes.forEach { $0.signal(SIGKILL) } }
        _ = try await bench.queue.enqueue(Array(repeating: NewJob(kind: .drillNoop), count: drainJobs))
        let started = ContinuousClock.now
        try await waitUntilCompleted(drainJobs, from: first, pool)
        let rate = Double(drainJobs) / (ContinuousClock.now - started).seconds
        try await bench.stop(processes)
        try await deleteDrillJobs(from: first, pool)
        return rate
    }

    /// Milliseconds from just before enqueueing each job, one at a time, to its handler starting
    /// on an idle worker: `latencySamples` jobs, or with `alongside`, as many as fit from its start
    /// to its end (and its result), so every sample has it running beside.
    private func startLatencies<T: Sendable>(
        _ bench: FleetQueueBench, beside alongside: (@Sendable () async throws -> T)?
    ) async throws -> (p50: Double, p99: Double, alongside: T?) {
        let pool = bench.database.pool
        let first = try await nextJobID(pool)
        let processes = try await bench.startWorkers(1)
        defer { processes.forEach { $0.signal(SIGKILL) } }
        let finished = Mutex(false)
        async let result: T? = {
            guard let alongside else { return nil }
            defer { finished.withLock { $0 = true } }
            return try await alongside()
        }()
        var sent = 0
        while alongside == nil ? sent < latencySamples : !finished.withLock({ $0 }) {
            _ = try await bench.queue.enqueue(NewJob(kind: .drillNoop, payload: "{\"sentAtNs\":\(wallClockNanoseconds())}"))
            sent += 1
            try await Task.sleep(for: .milliseconds(15))
        }
        let value = try await result
        try await waitUntilCompleted(sent, from: first, pool)
        try await bench.stop(processes)
        let latencies = try await pool.query("""
            SELECT (result->>'startLatencyNs')::float8 / 1e6 AS ms FROM jobs WHERE id >= $1 AND kind = 'drill.noop' ORDER BY 1
            """, [first]).rows.map { try $0.double("ms") }
        guard latencies.count == sent else { throw BenchError("\(latencies.count) of \(sent) latency samples recorded") }
        try await deleteDrillJobs(from: first, pool)
        return (percentile(latencies, 0.50), percentile(latencies, 0.99), value)
    }

    private func startLatencies(_ bench: FleetQueueBench) async throws -> (p50: Double, p99: Double) {
        let measured = try await startLatencies(bench, beside: Optional<@Sendable () async throws -> Int>.none)
        return (measured.p50, measured.p99)
    }

    private func waitUntilCompleted(_ count: Int, from first: Int64, _ pool: PostgresPool) async throws {
        let deadline = ContinuousClock.now + .seconds(300)
        while try await pool.query("SELECT count(*) AS n FROM jobs WHERE id >= $1 AND kind = 'drill.noop' AND state = 'completed'",
                                   [first]).rows[0].int("n") < count {
            guard ContinuousClock.now < deadline else { throw BenchError("\(count) drill jobs did not complete in time") }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    /// `jobs` finished jobs as a busy fleet keeps them, in statements of 1,000,000 (progress after
    /// each): the product's kinds, mostly completed, 6 % dead with three codes, 2 % cancelled,
    /// finished within their retention windows (completed and cancelled one day, dead seven) but
    /// for the `pruneable` oldest, finished past it; the count changes folded.
    static func fill(_ database: BenchDatabase, jobs: Int, pruneable: Int) async throws {
        for start in stride(from: 0, to: jobs, by: 1_000_000) {
            let end = min(jobs, start + 1_000_000)
            try await database.pool.query("""
                INSERT INTO jobs (kind, state, attempt, max_attempts, created_at, finished_at, errors, last_error_code, result)
                SELECT k.kind, s.state::job_state, 1, 5, f.at - interval '2 seconds', f.at,
                    CASE WHEN s.state = 'dead' THEN jsonb_build_array(jsonb_build_object('attempt', 1, 'at', f.at, 'error', 'failed',
                        'code', c.code)) ELSE '[]' END,
                    CASE WHEN s.state = 'dead' THEN c.code END,
                    CASE WHEN s.state = 'completed' THEN '{"bytes": 183211}'::jsonb END
                FROM generate_series($1::bigint, $2::bigint) AS i,
                    LATERAL (SELECT (ARRAY['image.normalize', 'garment.cutout', 'render.run', 'account.purge',
                                           'callback.deliver', 'http.request'])[1 + i % 6] AS kind) AS k,
                    LATERAL (SELECT CASE WHEN i % 100 < 6 THEN 'dead' WHEN i % 100 < 8 THEN 'cancelled' ELSE 'completed' END AS state) AS s,
                    LATERAL (SELECT (ARRAY['PROVIDER_DOWN', 'IMAGE_INVALID', 'LEASE_EXPIRED'])[1 + i % 3] AS code) AS c,
                    -- The oldest `pruneable` rows finished a week and a day ago (past every retention);
                    -- the others over the last 23 hours, newest last.
                    LATERAL (SELECT CASE WHEN i < $4 THEN now() - interval '8 days' + make_interval(secs => i * 3600.0 / greatest($4, 1))
                                         ELSE now() - make_interval(secs => ($3 - i) * 82800.0 / $3) END AS at) AS f
                """, [start, end - 1, jobs, pruneable])
            if jobs > 1_000_000 { progress("filled \(end) of \(jobs)") }
        }
        // The insert recorded a count change per finished job; folded as the dispatcher's
        // `counts.fold` task does every few seconds.
        let folding = ContinuousClock.now
        let folded = try await JobCountFolder(executor: database.pool).runOnce()
        // A fold of one change per row leaves as many dead rows in the changes' table, which every
        // read of the counts scans until autovacuum (a minute later) truncates it: vacuumed here.
        try await database.pool.query("VACUUM job_count_changes")
        if jobs > 1_000_000 { progress("folded \(folded) count changes in \(Int((ContinuousClock.now - folding).seconds)) s") }
    }

    private func printReport(_ report: Report, tableBytes: Int64, heapBytes: Int64, database: BenchDatabase) async throws {
        var names = ["enqueue", "drain", "start_p50", "start_p99", "stats_p99"]
        names += OpsSuite.filters.map { "list_p99.\($0.0)" }
        names += ["overview", "overview_live", "jobs", "jobs_dead_of_kind", "job", "dead", "queues", "workers", "schedule", "renders", "audit"]
            .map { "page_p99.\($0)" }
        if options.json {
            var lines = report.medians
            for name in names {
                if let small = report.median("small.\(name)"), let large = report.median("large.\(name)"), small > 0 {
                    lines.append(Measurement(metric: "large.\(name).ratio", value: large / small, unit: "x"))
                }
            }
            printJSONLines(lines)
            return
        }
        func format(_ value: Double?) -> String {
            guard let value else { return "-" }
            return value >= 100 ? String(format: "%.0f", value) : String(format: "%.2f", value)
        }
        var rows: [[String]] = names.map { name in
            let higherIsBetter = name == "enqueue" || name == "drain"
            let small = report.median("small.\(name)"), large = report.median("large.\(name)")
            let ratio = small.flatMap { s in large.map { $0 / s } }
            // The queue within 1.25× of the small table's figures; the reads within an absolute
            // bound (a ratio of milliseconds to a fraction of one measures the noise).
            let bound: Double? = name.hasPrefix("list_p99") ? 20 : name.hasPrefix("page_p99") || name == "stats_p99" ? 100 : nil
            let met: Bool? = bound.map { b in large.map { $0 <= b } ?? false } ?? ratio.map { higherIsBetter ? $0 >= 0.8 : $0 <= 1.25 }
            let target = bound.map { "<= \(Int($0)) ms" } ?? (higherIsBetter ? ">= 0.8x" : "<= 1.25x")
            return [name, higherIsBetter ? "jobs/s" : "ms", format(small), format(large), ratio.map { String(format: "%.2fx", $0) } ?? "-",
                    target, met.map { $0 ? "yes" : "NO" } ?? "-"]
        }
        let during = report.median("prune.start_p99_during"), after = report.median("prune.start_p99_after")
        rows.append(["prune rate", "rows/s", "-", format(report.median("prune.rate")), "-", "-", "-"])
        rows.append(["start_p99 during prune", "ms", format(after) + " (after)", format(during), during.flatMap { d in after.map { String(format: "%.2fx", d / $0) } } ?? "-",
                     "<= 2x", during.flatMap { d in after.map { d <= 2 * $0 ? "yes" : "NO" } } ?? "-"])
        printGrid(title: "large suite: medians of \(options.repeats) runs; \(Self.smallTable) jobs (small) against \(tableJobs) finished jobs (large)",
                  header: ["measure", "unit", "small", "large", "large/small", "target", "met"], rows: rows)
        [
            "enqueue: \(enqueueJobs) drill.noop in batches of 1,000; drain: \(drainJobs), one worker process; start: \(latencySamples) jobs one at a time, 15 ms apart\(cleanClaimIndex ? ", after a VACUUM (INDEX_CLEANUP ON) of jobs" : "")",
            "reads: \(readSamples) calls each (stats over an hour; jobs.list pages of 50, every fifth from the top, the others the next page; console pages over loopback by a logged-in client)",
            "prune: \(pruneJobs) rows past retention in the pruner's batches of \(pruneBatch) while a worker takes jobs, start latency sampled every 15 ms from its start to its end, against \(latencySamples) samples after it",
            "jobs after the prune: \(tableBytes / 1_048_576) MiB with indexes, heap \(heapBytes / 1_048_576) MiB",
            "server: \(try await database.settings())",
        ].forEach { Swift.print($0) }
    }
}
