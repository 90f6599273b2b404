import ArgumentParser
import FleetPostgres
import Foundation

/// A length of time on the command line: `90s`, `2m`, `1h`, or plain seconds.
struct BenchDuration: ExpressibleByArgument, CustomStringConvertible, Sendable {
    let seconds: Int

    init(seconds: Int) { self.seconds = seconds }

    init?(argument: String) {
        let units: [Character: Int] = ["s": 1, "m": 60, "h": 3_600]
        var digits = Substring(argument), unit = 1
        if let last = argument.last, let multiplier = units[last] {
            digits = argument.dropLast()
            unit = multiplier
        }
        guard let value = Int(digits), value >= 0 else { return nil }
        seconds = value * unit
    }

    var description: String { seconds % 60 == 0 ? "\(seconds / 60)m" : "\(seconds)s" }
}

/// A session in the fleet's database that holds a snapshot, as `pg_dump`, a long report or a
/// replica with `hot_standby_feedback` does: `BEGIN ISOLATION LEVEL REPEATABLE READ` and one read
/// of `jobs`, held open for `length` seconds from `start` (seconds after the soak's start).
struct SnapshotHold: Sendable {
    let start: Int
    let length: Int

    var end: Int { start + length }

    /// Seconds of minute `minute` (1-based, from the soak's start) during which the snapshot is held.
    func heldSeconds(inMinute minute: Int) -> Int {
        max(0, min(end, minute * 60) - max(start, (minute - 1) * 60))
    }

    /// Runs the hold on its own connection; returns when it is released (or the task is cancelled).
    func run(url: String, from origin: ContinuousClock.Instant) async throws {
        try await Task.sleep(until: origin + .seconds(start), clock: .continuous)
        let session = try await PostgresConnection.connect(url)
        try await session.query("BEGIN ISOLATION LEVEL REPEATABLE READ")
        _ = try await session.query("SELECT 1 FROM jobs LIMIT 1")
        progress("snapshot held from second \(start) for \(length) s")
        defer { progress("snapshot released") }
        do {
            try await Task.sleep(until: origin + .seconds(end), clock: .continuous)
        } catch {}
        try await session.query("ROLLBACK")
    }
}

/// The held minutes against the minutes before: the figures the held-snapshot target names
/// (docs/benchmarks.md, "Held snapshot").
struct HoldSummary {
    let before: [MinuteSample]
    let held: [MinuteSample]
    let after: [MinuteSample]

    init(samples: [MinuteSample], hold: SnapshotHold) {
        // Whole minutes only; the first minute warms up and the one the hold starts in is mixed.
        before = samples.filter { $0.minute > 1 && $0.minute * 60 <= hold.start }
        held = samples.filter { hold.heldSeconds(inMinute: $0.minute) == 60 }
        after = samples.filter { ($0.minute - 1) * 60 >= hold.end }
    }

    var beforeP50: Double { median(before.map(\.jobs.p50Ms)) }
    var beforeP99: Double { median(before.map(\.jobs.p99Ms)) }
    var heldP50: Double { median(held.map(\.jobs.p50Ms)) }
    var heldP99: Double { median(held.map(\.jobs.p99Ms)) }
    var p50Ratio: Double { beforeP50 > 0 ? heldP50 / beforeP50 : .nan }
    var p99Ratio: Double { beforeP99 > 0 ? heldP99 / beforeP99 : .nan }
    /// The worst held minute's throughput against the jobs enqueued in it (1.0: kept up with the
    /// load as sent, which on a busy machine can fall short of `--rate`).
    var minThroughputRatio: Double { held.map(\.throughputRatio).min() ?? .nan }

    /// Minutes after the release until the first whole minute with p50 ≤ 2× and p99 ≤ 3× the
    /// minutes before and the load kept up with; nil: not within the run.
    var minutesToRecover: Int? {
        after.firstIndex { sample in
            sample.jobs.p50Ms <= 2 * beforeP50 && sample.jobs.p99Ms <= 3 * beforeP99 && sample.throughputRatio >= 0.98
        }.map { $0 + 1 }
    }

    var line: String {
        let minutes = held.isEmpty ? "none whole" : "\(held.first!.minute)-\(held.last!.minute)"
        return String(format: "held snapshot: minutes %@ held; start p50 %.1f ms = %.2f× before (%.1f ms), p99 %.1f ms = %.2f× before (%.1f ms); "
                      + "min throughput %.3f× the jobs enqueued; recovered ", minutes, heldP50, p50Ratio, beforeP50, heldP99, p99Ratio, beforeP99,
                      minThroughputRatio)
            + (minutesToRecover.map { "in \($0) minute(s) after the release" } ?? "not within the run")
    }

    var json: String {
        func number(_ value: Double) -> String { value.isFinite ? String(format: "%.3f", value) : "null" }
        return """
            {"held_minutes":[\(held.map { String($0.minute) }.joined(separator: ","))],"before_p50_ms":\(number(beforeP50)),\
            "before_p99_ms":\(number(beforeP99)),"held_p50_ms":\(number(heldP50)),"held_p99_ms":\(number(heldP99)),\
            "p50_ratio":\(number(p50Ratio)),"p99_ratio":\(number(p99Ratio)),"min_throughput_ratio":\(number(minThroughputRatio)),\
            "minutes_to_recover":\(minutesToRecover.map(String.init) ?? "null")}
            """
    }
}

extension MinuteSample {
    /// Jobs finished in the minute against jobs enqueued in it.
    var throughputRatio: Double { enqueued > 0 ? Double(finished) / Double(enqueued) : .nan }
}
