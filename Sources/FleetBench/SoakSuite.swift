import ArgumentParser
import DispatcherCore
import DrillKinds
import FleetPostgres
import FleetQueue
import FleetSupport
import Foundation
import Logging
import Synchronization

/// `fleet-bench soak`: a steady mixed load at a fraction of the measured drain rate for N
/// minutes — enqueues half in batches, half singly; a few % of jobs fail once and retry, about
/// 1 % end dead; the pruner deletes finished jobs after a short retention — printing each minute
/// the throughput, enqueue-to-start p50/p99, the `jobs` table and index sizes, dead tuples and
/// autovacuum runs. The summary compares the last minutes with the first ones: a queue table
/// that bloats, or a vacuum that falls behind, shows as sizes that keep growing and a p99 that
/// creeps up.
struct SoakSuite: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "soak", abstract: "A steady mixed load for N minutes: throughput, start latency, table size, vacuum.",
        discussion: """
            Phase 1 measures the drain rate of drill.noop jobs with --workers worker processes, and the \
            mixed load's capacity (sent as fast as it goes for --capacity-seconds, the workers draining); \
            --rate skips both. Phase 2 enqueues --load-fraction of the smaller for --minutes, the pruner running every \
            --prune-every-seconds with a retention of --prune-after-seconds for completed, cancelled and dead \
            jobs. Targets: throughput and p99 of the last 10 minutes within 10 % of the first 10; table + \
            index size at the end within 10 % of the size one minute after the retention first applies. \
            --hold-snapshot-after holds a snapshot in the fleet's database for --hold-for (a REPEATABLE READ \
            transaction that read jobs, as pg_dump holds one): the minutes mark the seconds held, and a line \
            compares the held minutes with those before (start p50 and p99), the worst held minute's \
            throughput with the load, and counts the minutes to recover after the release.
            """)

    @Flag(help: "Print one JSON object per line: one per minute, then the summary.")
    var json = false
    @Option(help: "Minutes of steady load.") var minutes = 30
    @Option(help: "The load as a fraction of the smaller of the measured drain rate and mixed-load capacity.") var loadFraction = 0.7
    @Option(help: "Jobs per second to enqueue; skips measuring the drain rate.") var rate: Double?
    @Option(help: "Retention of finished jobs (completed, cancelled, dead), in seconds; at least 90.") var pruneAfterSeconds = 120
    @Option(help: "How often the pruner runs, in seconds.") var pruneEverySeconds = 10
    @Option(help: "Drill worker processes.") var workers = 2
    @Option(help: "drill.noop jobs each worker process runs at once.") var workerConcurrency = 1_000
    @Option(help: "Jobs of the drain-rate measurement.") var drainJobs = 20_000
    @Option(help: "Seconds of the mixed-load capacity measurement.") var capacitySeconds = 30
    @Option(help: "Jobs per batched enqueue (half of the load is batched, half single).") var batch = 50
    @Option(help: "Concurrent senders of single enqueues.") var singleSenders = 8
    @Option(help: "Percent of jobs that fail their first attempt and succeed on the retry.") var retryPercent = 3.0
    @Option(help: "Percent of jobs that fail for good (end dead).") var deadPercent = 1.0
    @Option(help: "Storage parameters for this run only, e.g. 'fillfactor=70,autovacuum_vacuum_scale_factor=0.005' (ALTER TABLE jobs SET (…)).")
    var tableSettings: String?
    @Option(help: "Hold a snapshot in the fleet's database from this long after the load starts (90s, 2m; none when unset).")
    var holdSnapshotAfter: BenchDuration?
    @Option(help: "How long the snapshot is held (with --hold-snapshot-after).") var holdFor = BenchDuration(seconds: 360)

    func validate() throws {
        guard minutes >= 1 else { throw ValidationError("--minutes must be at least 1") }
        // The per-minute figures read finished rows of the minute just ended: they must survive it.
        guard pruneAfterSeconds >= 90 else { throw ValidationError("--prune-after-seconds must be at least 90") }
        guard pruneEverySeconds >= 1, batch >= 1, singleSenders >= 1, workers >= 1 else {
            throw ValidationError("--prune-every-seconds, --batch, --single-senders and --workers must be positive")
        }
        guard loadFraction > 0, retryPercent >= 0, deadPercent >= 0, retryPercent + deadPercent <= 100 else {
            throw ValidationError("--load-fraction must be positive; --retry-percent + --dead-percent at most 100")
        }
        if let holdSnapshotAfter, holdSnapshotAfter.seconds >= minutes * 60 {
            throw ValidationError("--hold-snapshot-after \(holdSnapshotAfter) starts after the last of --minutes \(minutes)")
        }
    }

    func run() async throws {
        let database = try await BenchDatabase.prepare()
        let bench = FleetQueueBench(database: database, workerConcurrency: workerConcurrency)
        let mix = JobMix(retryPerMille: Int((retryPercent * 10).rounded()), deadPerMille: Int((deadPercent * 10).rounded()))
        var drainRate: Double?, capacity: Double?
        if rate == nil {
            progress("phase 1: drain rate of \(drainJobs) drill.noop jobs with \(workers) worker process(es)")
            drainRate = try await bench.drainRate(jobs: drainJobs, workers: workers)
            progress(String(format: "drain rate %.0f jobs/s", drainRate!))
            progress("phase 1: the mixed load as fast as it goes for \(capacitySeconds) s (the first 5 not counted)")
            capacity = try await measureCapacity(bench, database, mix: mix)
            progress(String(format: "mixed-load capacity %.0f jobs/s", capacity!))
        }
        let measured = [drainRate, capacity].compactMap { $0 }.min()
        let target = rate ?? measured! * loadFraction

        try await bench.reset()
        if let tableSettings, !tableSettings.isEmpty {
            try await database.pool.query("ALTER TABLE jobs SET (\(tableSettings))")
        }
        let setup = try await Setup.read(database)
        let processes = try await bench.startWorkers(workers)
        defer { processes.forEach { $0.signal(SIGKILL) } }

        let producerPool = PostgresPool(conninfo: database.url, maxConnections: singleSenders + 2, applicationName: "fleet-bench-soak")
        let counters = SoakCounters()
        var logger = Logger(label: "fleet-bench-soak")
        logger.logLevel = .warning
        let pruner = Pruner(
            executor: database.pool,
            retention: Retention(completed: .seconds(pruneAfterSeconds), cancelled: .seconds(pruneAfterSeconds), dead: .seconds(pruneAfterSeconds)),
            logger: logger)

        let origin = measured.map { String(format: "%.2f of %.0f", loadFraction, $0) } ?? "--rate"
        progress(String(format: "phase 2: %d minute(s) at %.0f jobs/s", minutes, target)
                 + " (\(origin)), \(workers) worker process(es), retention \(pruneAfterSeconds) s, prune every \(pruneEverySeconds) s")
        let started = ContinuousClock.now
        let startEpoch = try await database.pool.query("SELECT extract(epoch FROM clock_timestamp())::float8 AS t").rows[0].double("t")
        let baseline = try await TableStats.read(database.pool)
        let hold = holdSnapshotAfter.map { SnapshotHold(start: $0.seconds, length: holdFor.seconds) }
        let holding = Task { [url = database.url] in
            do { try await hold?.run(url: url, from: started) } catch { if !Task.isCancelled { progress("snapshot hold failed: \(error)") } }
        }

        let queue = JobQueue(executor: producerPool, knownKinds: FleetKinds.all)
        let load = startLoad(rate: target, queue: queue, mix: mix, counters: counters)
        let pruneEvery = self.pruneEverySeconds
        let pruning = Task {
            while !Task.isCancelled {
                do {
                    try await Task.sleep(for: .seconds(pruneEvery))
                    let began = ContinuousClock.now
                    let deleted = try await pruner.runOnce()
                    _ = counters.pruned.add(deleted, ordering: .relaxed)
                    _ = counters.pruneMs.add(Int((ContinuousClock.now - began).seconds * 1000), ordering: .relaxed)
                } catch {
                    if Task.isCancelled { return }
                    _ = counters.pruneErrors.add(1, ordering: .relaxed)
                }
            }
        }

        // The dispatcher's `counts.fold` task, every 5 s as it runs there: the count triggers'
        // changes are folded away, as in a fleet, instead of piling up for the whole soak.
        let folder = JobCountFolder(executor: database.pool)
        let folding = Task {
            while !Task.isCancelled {
                do {
                    try await Task.sleep(for: .seconds(5))
                    _ = try await folder.runOnce()
                } catch {
                    if Task.isCancelled { return }
                    _ = counters.foldErrors.add(1, ordering: .relaxed)
                }
            }
        }

        if !json {
            print(String(format: "soak: %d minute(s) at %.0f jobs/s", minutes, target)
                  + (measured.map { String(format: " (%.2f of %.0f jobs/s: drain rate %.0f, mixed-load capacity %.0f)", loadFraction, $0, drainRate!, capacity!) } ?? " (--rate)")
                  + ", \(workers) worker process(es), batches of \(batch) and single enqueues (\(singleSenders) senders)")
            print("mix: \(retryPercent) % fail once then succeed, \(deadPercent) % end dead; retention \(pruneAfterSeconds) s, pruner every \(pruneEverySeconds) s")
            print("jobs: \(setup.reloptions); server: \(setup.server)")
            printMinuteHeader()
        }
        var samples: [MinuteSample] = []
        var previous = baseline
        var previousCounters = counters.snapshot()
        for minute in 1...minutes {
            // Two seconds' grace for the last outcomes of the minute to be written.
            try await Task.sleep(until: started + .seconds(60 * minute + 2), clock: .continuous)
            let window = (startEpoch + Double(60 * (minute - 1)), startEpoch + Double(60 * minute))
            let jobs = try await JobWindow.read(database.pool, from: window.0, to: window.1)
            let stats = try await TableStats.read(database.pool)
            let now = counters.snapshot()
            let sample = MinuteSample(
                minute: minute, jobs: jobs, stats: stats,
                enqueued: now.enqueued - previousCounters.enqueued, enqueueErrors: now.enqueueErrors - previousCounters.enqueueErrors,
                pruned: now.pruned - previousCounters.pruned, pruneMs: now.pruneMs - previousCounters.pruneMs,
                autovacuums: stats.autovacuumCount - baseline.autovacuumCount,
                hotPercent: stats.updates > previous.updates
                    ? 100 * Double(stats.hotUpdates - previous.hotUpdates) / Double(stats.updates - previous.updates) : 0,
                heldSeconds: hold?.heldSeconds(inMinute: minute) ?? 0)
            samples.append(sample)
            if json { print(sample.json) } else { printMinute(sample) }
            fflush(nil)  // a minute at a time through a pipe, too
            previous = stats
            previousCounters = now
        }
        load.cancel()
        pruning.cancel()
        folding.cancel()
        holding.cancel()
        await holding.value
        await load.value
        await pruning.value
        await folding.value
        try await bench.stop(processes)
        let summary = Summary(samples: samples, target: target, pruneAfterSeconds: pruneAfterSeconds,
                              pruneErrors: counters.pruneErrors.load(ordering: .relaxed), foldErrors: counters.foldErrors.load(ordering: .relaxed))
        let holdSummary = hold.map { HoldSummary(samples: samples, hold: $0) }
        if json {
            print(summary.json(drainRate: drainRate, capacity: capacity, loadFraction: rate == nil ? loadFraction : nil, workers: workers, reloptions: setup.reloptions))
            if let holdSummary { print(holdSummary.json) }
        } else {
            summary.printTable()
            if let holdSummary { print(holdSummary.line) }
        }
        if !summary.allMet { throw ExitCode(1) }
    }

    private func printMinuteHeader() {
        let header = MinuteSample.columns.map { $0.padding(toLength: max($0.count, 9), withPad: " ", startingAt: 0) }
        print(header.joined(separator: "  "))
        print(header.map { String(repeating: "-", count: $0.count) }.joined(separator: "  "))
    }

    private func printMinute(_ sample: MinuteSample) {
        print(zip(MinuteSample.columns, sample.cells).map { column, cell in
            cell.padding(toLength: max(column.count, 9), withPad: " ", startingAt: 0)
        }.joined(separator: "  "))
    }
}

extension SoakSuite {
    /// Jobs per second the mixed load sustains end to end when sent as fast as it goes (half
    /// in batches, half single through the concurrent senders) with the workers draining: the
    /// enqueue side, not the drain, is what limits it on a small machine. Counts the jobs that
    /// finished between second 5 and the end.
    func measureCapacity(_ bench: FleetQueueBench, _ database: BenchDatabase, mix: JobMix) async throws -> Double {
        try await bench.reset()
        let processes = try await bench.startWorkers(workers)
        defer { processes.forEach { $0.signal(SIGKILL) } }
        let pool = PostgresPool(conninfo: database.url, maxConnections: singleSenders + 2, applicationName: "fleet-bench-soak")
        let queue = JobQueue(executor: pool, knownKinds: FleetKinds.all)
        let load = startLoad(rate: .infinity, queue: queue, mix: mix, counters: SoakCounters())
        try await Task.sleep(for: .seconds(5))
        let from = try await database.pool.query("SELECT extract(epoch FROM clock_timestamp())::float8 AS t").rows[0].double("t")
        try await Task.sleep(for: .seconds(max(1, capacitySeconds - 5)))
        let to = try await database.pool.query("SELECT extract(epoch FROM clock_timestamp())::float8 AS t").rows[0].double("t")
        load.cancel()
        await load.value
        try await bench.stop(processes)
        let finished = try await database.pool.query("""
            SELECT count(*) AS n FROM jobs
            WHERE state IN ('completed', 'dead') AND finished_at >= to_timestamp($1::float8) AND finished_at < to_timestamp($2::float8)
            """, [from, to], planning: .eachCall).rows[0].int("n")
        try await bench.reset()
        return Double(finished) / (to - from)
    }

    /// Enqueues `rate` jobs per second of `mix` until cancelled: half in batches of `batch`,
    /// half single, spread over `singleSenders` concurrent senders.
    func startLoad(rate: Double, queue: JobQueue, mix: JobMix, counters: SoakCounters) -> Task<Void, Never> {
        let batch = self.batch, senders = self.singleSenders
        // Unpaced, the batches keep to the singles' count, so the mix stays half and half.
        let singlesSent: (@Sendable () -> Int)?
        if rate.isInfinite { singlesSent = { counters.single.load(ordering: .relaxed) } } else { singlesSent = nil }
        return Task {
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    await paced(rate: rate / 2, step: batch, counters: counters, kept: singlesSent) {
                        _ = try await queue.enqueue((0..<batch).map { _ in mix.next() })
                        _ = counters.batched.add(batch, ordering: .relaxed)
                    }
                }
                for _ in 0..<senders {
                    group.addTask {
                        await paced(rate: rate / 2 / Double(senders), step: 1, counters: counters) {
                            _ = try await queue.enqueue(mix.next())
                            _ = counters.single.add(1, ordering: .relaxed)
                        }
                    }
                }
            }
        }
    }
}

/// Calls `send` (`step` jobs each) so that `rate` jobs per second leave on average, until
/// cancelled. Behind schedule it sends back to back; it never sends ahead. An infinite rate
/// sends back to back, or, with `kept`, as many jobs as `kept` says the others sent.
private func paced(
    rate: Double, step: Int, counters: SoakCounters, kept: (@Sendable () -> Int)? = nil, _ send: @Sendable () async throws -> Void
) async {
    guard rate > 0 else { return }
    let started = ContinuousClock.now
    var sent = 0
    while !Task.isCancelled {
        let due = rate.isInfinite ? Double(kept?() ?? Int.max) : rate * (ContinuousClock.now - started).seconds
        if Double(sent + step) <= due {
            do {
                try await send()
                sent += step
                _ = counters.enqueued.add(step, ordering: .relaxed)
            } catch {
                if Task.isCancelled { return }
                _ = counters.enqueueErrors.add(1, ordering: .relaxed)
                try? await Task.sleep(for: .milliseconds(100))
            }
        } else {
            let wait = rate.isInfinite ? 0.001 : (Double(sent + step) - due) / rate
            do { try await Task.sleep(for: .milliseconds(max(1, Int(wait * 1000)))) } catch { return }
        }
    }
}

/// What each job does: most are drill.noop, some drill.script jobs fail once then succeed, and
/// some fail for good.
struct JobMix: Sendable {
    let retryPerMille: Int
    let deadPerMille: Int

    func next() -> NewJob {
        let draw = Int.random(in: 0..<1000)
        if draw < deadPerMille { return NewJob(kind: .drillScript, payload: #"{"permanent":true}"#) }
        if draw < deadPerMille + retryPerMille { return NewJob(kind: .drillScript, payload: #"{"failAttempts":1}"#) }
        return NewJob(kind: .drillNoop)
    }
}

final class SoakCounters: Sendable {
    let enqueued = Atomic<Int>(0)
    let single = Atomic<Int>(0)
    let batched = Atomic<Int>(0)
    let enqueueErrors = Atomic<Int>(0)
    let pruned = Atomic<Int>(0)
    let pruneMs = Atomic<Int>(0)
    let pruneErrors = Atomic<Int>(0)
    let foldErrors = Atomic<Int>(0)

    struct Snapshot { let enqueued, enqueueErrors, pruned, pruneMs: Int }

    func snapshot() -> Snapshot {
        Snapshot(enqueued: enqueued.load(ordering: .relaxed), enqueueErrors: enqueueErrors.load(ordering: .relaxed),
                 pruned: pruned.load(ordering: .relaxed), pruneMs: pruneMs.load(ordering: .relaxed))
    }
}

/// The storage settings and server settings the figures depend on.
struct Setup {
    let reloptions: String
    let server: String

    static func read(_ database: BenchDatabase) async throws -> Setup {
        let reloptions = try await database.pool.query(
            "SELECT coalesce(array_to_string(reloptions, ' '), '') AS o FROM pg_class WHERE oid = 'jobs'::regclass").rows[0].string("o")
        let rows = try await database.pool.query("""
            SELECT name, setting FROM pg_settings
            WHERE name IN ('autovacuum_naptime', 'autovacuum_vacuum_cost_limit', 'vacuum_cost_limit', 'autovacuum_max_workers')
            ORDER BY name
            """).rows
        let autovacuum = try rows.map { "\(try $0.string("name"))=\(try $0.string("setting"))" }.joined(separator: " ")
        return Setup(reloptions: reloptions, server: "\(try await database.settings()) \(autovacuum)")
    }
}

/// The jobs of one minute, read from the table's timestamps (the retention outlives a minute).
struct JobWindow {
    let completed: Int
    let dead: Int
    /// Finished after more than one attempt.
    let retried: Int
    /// First attempts started in the minute: enqueue (created_at) to claim (started_at).
    let started: Int
    let p50Ms: Double
    let p99Ms: Double
    /// Queued or running at the end of the minute.
    let backlog: Int

    static func read(_ pool: PostgresPool, from: Double, to: Double) async throws -> JobWindow {
        let row = try await pool.query("""
            WITH w AS (SELECT to_timestamp($1::float8) AS a, to_timestamp($2::float8) AS b)
            SELECT
                count(*) FILTER (WHERE state = 'completed' AND finished_at >= a AND finished_at < b) AS completed,
                count(*) FILTER (WHERE state = 'dead' AND finished_at >= a AND finished_at < b) AS dead,
                count(*) FILTER (WHERE state IN ('completed', 'dead') AND attempt > 1 AND finished_at >= a AND finished_at < b) AS retried,
                count(*) FILTER (WHERE attempt = 1 AND started_at >= a AND started_at < b) AS started,
                coalesce(percentile_cont(0.50) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - created_at))
                    FILTER (WHERE attempt = 1 AND started_at >= a AND started_at < b), 0) * 1000 AS p50,
                coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - created_at))
                    FILTER (WHERE attempt = 1 AND started_at >= a AND started_at < b), 0) * 1000 AS p99,
                count(*) FILTER (WHERE state IN ('available', 'running')) AS backlog
            FROM jobs, w
            """, [from, to], planning: .eachCall).rows[0]
        return JobWindow(completed: try row.int("completed"), dead: try row.int("dead"), retried: try row.int("retried"),
                         started: try row.int("started"), p50Ms: try row.double("p50"), p99Ms: try row.double("p99"),
                         backlog: try row.int("backlog"))
    }
}

/// `jobs`' size and vacuum state (pg_stat_user_tables).
struct TableStats {
    let tableBytes: Int64
    let indexBytes: Int64
    let liveTuples: Int64
    let deadTuples: Int64
    let autovacuumCount: Int64
    let lastAutovacuum: Date?
    let updates: Int64
    let hotUpdates: Int64

    static func read(_ pool: PostgresPool) async throws -> TableStats {
        let row = try await pool.query("""
            SELECT pg_relation_size('jobs') AS table_bytes, pg_indexes_size('jobs') AS index_bytes,
                n_live_tup, n_dead_tup, autovacuum_count, extract(epoch FROM last_autovacuum) AS last_autovacuum,
                n_tup_upd, n_tup_hot_upd
            FROM pg_stat_user_tables WHERE relid = 'jobs'::regclass
            """, planning: .eachCall).rows[0]
        return TableStats(
            tableBytes: try row.int64("table_bytes"), indexBytes: try row.int64("index_bytes"),
            liveTuples: try row.int64("n_live_tup"), deadTuples: try row.int64("n_dead_tup"),
            autovacuumCount: try row.int64("autovacuum_count"), lastAutovacuum: try row.optionalDate("last_autovacuum"),
            updates: try row.int64("n_tup_upd"), hotUpdates: try row.int64("n_tup_hot_upd"))
    }
}

struct MinuteSample {
    let minute: Int
    let jobs: JobWindow
    let stats: TableStats
    let enqueued: Int
    let enqueueErrors: Int
    let pruned: Int
    let pruneMs: Int
    /// Autovacuums of `jobs` since the soak began.
    let autovacuums: Int64
    /// HOT updates among the minute's updates, percent.
    let hotPercent: Double
    /// Seconds of the minute during which a snapshot was held (`--hold-snapshot-after`).
    let heldSeconds: Int

    var finished: Int { jobs.completed + jobs.dead }
    var sizeBytes: Int64 { stats.tableBytes + stats.indexBytes }

    static let columns = ["min", "held s", "enqueued", "done/min", "dead", "retried", "p50 ms", "p99 ms", "backlog",
                          "table MB", "index MB", "dead tup", "autovac", "last autovac", "hot %", "pruned", "prune ms"]

    var cells: [String] {
        [String(minute), heldSeconds > 0 ? String(heldSeconds) : "-", String(enqueued), String(finished), String(jobs.dead), String(jobs.retried),
         String(format: "%.1f", jobs.p50Ms), String(format: "%.1f", jobs.p99Ms), String(jobs.backlog),
         megabytes(stats.tableBytes), megabytes(stats.indexBytes), String(stats.deadTuples), String(autovacuums),
         stats.lastAutovacuum.map(clockTime) ?? "-", String(format: "%.0f", hotPercent), String(pruned), String(pruneMs)]
    }

    var json: String {
        let last = stats.lastAutovacuum.map { "\"\(ISO8601DateFormatter().string(from: $0))\"" } ?? "null"
        return """
            {"minute":\(minute),"enqueued":\(enqueued),"enqueue_errors":\(enqueueErrors),"completed":\(jobs.completed),\
            "dead":\(jobs.dead),"retried":\(jobs.retried),"throughput_per_min":\(finished),"started":\(jobs.started),\
            "start_p50_ms":\(String(format: "%.3f", jobs.p50Ms)),"start_p99_ms":\(String(format: "%.3f", jobs.p99Ms)),\
            "backlog":\(jobs.backlog),"table_bytes":\(stats.tableBytes),"index_bytes":\(stats.indexBytes),\
            "live_tuples":\(stats.liveTuples),"dead_tuples":\(stats.deadTuples),"autovacuum_count":\(autovacuums),\
            "last_autovacuum":\(last),"hot_update_percent":\(String(format: "%.1f", hotPercent)),\
            "pruned":\(pruned),"prune_ms":\(pruneMs),"held_seconds":\(heldSeconds)}
            """
    }
}

private func megabytes(_ bytes: Int64) -> String { String(format: "%.1f", Double(bytes) / 1_048_576) }

private func clockTime(_ date: Date) -> String {
    let formatter = DateFormatter()
    formatter.dateFormat = "HH:mm:ss"
    formatter.timeZone = TimeZone(identifier: "UTC")
    return formatter.string(from: date)
}

/// First minutes against last minutes, and the size after the retention first applies against
/// the size at the end.
struct Summary {
    let samples: [MinuteSample]
    let target: Double
    let pruneAfterSeconds: Int
    let pruneErrors: Int
    let foldErrors: Int

    /// Minutes compared at each end: 10, or half the run when it is shorter than 20 minutes.
    var window: Int { max(1, min(10, samples.count / 2)) }
    var first: ArraySlice<MinuteSample> { samples.prefix(window) }
    var last: ArraySlice<MinuteSample> { samples.suffix(window) }

    var firstThroughput: Double { mean(first.map { Double($0.finished) }) }
    var lastThroughput: Double { mean(last.map { Double($0.finished) }) }
    /// The median of the per-minute p99s (one noisy minute does not decide).
    var firstP99: Double { median(first.map(\.jobs.p99Ms)) }
    var lastP99: Double { median(last.map(\.jobs.p99Ms)) }
    var throughputRatio: Double { firstThroughput > 0 ? lastThroughput / firstThroughput : 0 }
    var p99Ratio: Double { firstP99 > 0 ? lastP99 / firstP99 : 0 }

    /// The first minute ending at least a minute after the retention first lets the pruner delete.
    var referenceMinute: Int { min(samples.count, Int((Double(pruneAfterSeconds + 60) / 60).rounded(.up))) }
    var referenceSize: Int64 { samples[referenceMinute - 1].sizeBytes }
    var endSize: Int64 { samples.last!.sizeBytes }
    var maxSizeAfterReference: Int64 { samples[(referenceMinute - 1)...].map(\.sizeBytes).max() ?? 0 }
    var sizeRatio: Double { referenceSize > 0 ? Double(endSize) / Double(referenceSize) : 0 }
    var enqueuedRate: Double { Double(samples.map(\.enqueued).reduce(0, +)) / Double(samples.count * 60) }

    var throughputMet: Bool { throughputRatio >= 0.9 }
    var p99Met: Bool { p99Ratio <= 1.1 }
    var sizeMet: Bool { sizeRatio <= 1.1 }
    var allMet: Bool { throughputMet && p99Met && sizeMet }

    func printTable() {
        let rows: [[String]] = [
            ["throughput", "jobs/min", String(format: "%.0f", firstThroughput), String(format: "%.0f", lastThroughput),
             String(format: "%.3f", throughputRatio), ">= 0.90", throughputMet ? "PASS" : "FAIL"],
            ["start p99", "ms", String(format: "%.1f", firstP99), String(format: "%.1f", lastP99),
             String(format: "%.3f", p99Ratio), "<= 1.10", p99Met ? "PASS" : "FAIL"],
            ["table+index", "MB", megabytes(referenceSize), megabytes(endSize), String(format: "%.3f", sizeRatio), "<= 1.10",
             sizeMet ? "PASS" : "FAIL"],
        ]
        print("")
        printGrid(title: "soak summary: minutes 1-\(window) against \(samples.count - window + 1)-\(samples.count); "
                  + "size at minute \(referenceMinute) (retention + 1 min) against minute \(samples.count)",
                  header: ["measure", "unit", "first", "last", "ratio", "target", "result"], rows: rows)
        print(String(format: "enqueued %.0f jobs/s on average (target %.0f)", enqueuedRate, target)
              + "; largest table+index after minute \(referenceMinute): \(megabytes(maxSizeAfterReference)) MB; prune errors: \(pruneErrors); fold errors: \(foldErrors)")
        print("p99: median of the per-minute p99s; throughput: completed + dead jobs per minute, mean")
    }

    func json(drainRate: Double?, capacity: Double?, loadFraction: Double?, workers: Int, reloptions: String) -> String {
        func number(_ value: Double?) -> String { value.map { $0.isFinite ? String(format: "%.3f", $0) : "null" } ?? "null" }
        return """
            {"summary":true,"minutes":\(samples.count),"window_minutes":\(window),"drain_rate":\(number(drainRate)),"capacity":\(number(capacity)),\
            "load_fraction":\(number(loadFraction)),"target_rate":\(number(target)),"enqueued_rate":\(number(enqueuedRate)),\
            "workers":\(workers),"reloptions":"\(reloptions)","retention_seconds":\(pruneAfterSeconds),\
            "throughput_first":\(number(firstThroughput)),"throughput_last":\(number(lastThroughput)),\
            "throughput_ratio":\(number(throughputRatio)),"throughput_pass":\(throughputMet),\
            "p99_first_ms":\(number(firstP99)),"p99_last_ms":\(number(lastP99)),"p99_ratio":\(number(p99Ratio)),"p99_pass":\(p99Met),\
            "size_reference_minute":\(referenceMinute),"size_reference_bytes":\(referenceSize),"size_end_bytes":\(endSize),\
            "size_max_after_reference_bytes":\(maxSizeAfterReference),"size_ratio":\(number(sizeRatio)),"size_pass":\(sizeMet),\
            "prune_errors":\(pruneErrors),"fold_errors":\(foldErrors),"pass":\(allMet)}
            """
    }
}

private func mean(_ values: [Double]) -> Double { values.isEmpty ? 0 : values.reduce(0, +) / Double(values.count) }

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return 0 }
    return sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}
