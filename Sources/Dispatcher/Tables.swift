import ArgumentParser
import DispatcherProtocol
import Foundation

/// Columns aligned for people, as `river` and `kubectl` print them; `--json` gives scripts the answer whole.
struct TextTable {
    let headers: [String]
    /// Columns whose values are right-aligned (counts).
    var numeric: Set<Int> = []
    private(set) var rows: [[String]] = []

    init(_ headers: String..., numeric: Set<Int> = []) {
        self.headers = headers
        self.numeric = numeric
    }

    mutating func append(_ row: String...) { rows.append(row) }

    var text: String {
        let widths = headers.indices.map { column in ([headers] + rows).map { $0[column].count }.max() ?? 0 }
        return ([headers] + rows).map { row in
            row.indices.map { column in
                let pad = String(repeating: " ", count: widths[column] - row[column].count)
                return numeric.contains(column) ? pad + row[column] : row[column] + pad
            }.joined(separator: "  ").trimmingCharacters(in: .whitespaces)
        }.joined(separator: "\n")
    }
}

/// `--json` of the commands that print a table by default.
struct OutputFormat: ParsableArguments {
    @Flag(help: "Print the answer as JSON (for scripts) instead of a table.") var json = false

    /// The table, or the whole answer as JSON.
    func print<Value: Encodable>(_ value: Value, table: (Value) -> String) throws {
        if json { try printJSON(value) } else { Swift.print(table(value)) }
    }
}

enum StatsTable {
    static func text(_ stats: QueueStats) -> String {
        var kinds = TextTable("KIND", "DUE", "SCHEDULED", "RUNNING", "RETRYING", "WAITING", "COMPLETED", "DEAD", "CANCELLED", "LAG", "PAUSED",
                              numeric: Set(1...9))
        for kind in stats.kinds {
            kinds.append(kind.kind, "\(kind.due)", "\(kind.scheduled)", "\(kind.running)", "\(kind.retrying)", "\(kind.waiting)",
                         "\(kind.completed)", "\(kind.dead)", "\(kind.cancelled)", kind.oldestDueSeconds.map(seconds) ?? "-", kind.paused ? "paused" : "")
        }
        var sections = [kinds.text, "(completed, dead, cancelled: finished in the last \(stats.windowSeconds) s)"]
        var workers = TextTable("WORKER", "EXECUTABLE", "PID", "RUNNING", "HEARTBEAT", "KINDS", numeric: [2, 3])
        for worker in stats.workers {
            let paused = worker.pausedKinds.isEmpty ? "" : " (paused: \(worker.pausedKinds.joined(separator: ",")))"
            workers.append(worker.id, worker.executable, "\(worker.pid)", "\(worker.running)",
                           seconds(stats.serverTime.timeIntervalSince(worker.lastHeartbeatAt)) + " ago", worker.kinds.joined(separator: ",") + paused)
        }
        sections.append(stats.workers.isEmpty ? "no live workers" : workers.text)
        if !stats.pauses.isEmpty {
            var pauses = TextTable("PAUSED", "NAME", "BY", "SINCE")
            for pause in stats.pauses { pauses.append(pause.scope.rawValue, pause.name, pause.pausedBy, pause.pausedAt.formatted(.iso8601)) }
            sections.append(pauses.text)
        }
        if !stats.limits.isEmpty { sections.append(LimitsTable.text(stats.limits)) }
        return sections.joined(separator: "\n\n")
    }

    static func seconds(_ value: Double) -> String {
        value < 10 ? String(format: "%.1fs", value) : "\(Int(value.rounded()))s"
    }
}

enum LimitsTable {
    static func text(_ limits: [LimitView]) -> String {
        var table = TextTable("LIMIT", "MAX-RUNNING", "RATE", "WINDOW", "RUNNING", "WAITING", numeric: [1, 2, 3, 4, 5])
        for limit in limits {
            let rate = limit.rate.map { rate in limit.effectiveRate.map { $0 < rate ? "\($0) of \(rate)" : "\(rate)" } ?? "\(rate)" } ?? "-"
            table.append(limit.key, limit.maxRunning.map(String.init) ?? "-", rate, StatsTable.seconds(limit.rateWindowSeconds),
                         "\(limit.keys.reduce(0) { $0 + $1.running })", "\(limit.keys.reduce(0) { $0 + $1.waiting })")
        }
        return table.text
    }
}

enum JobsTable {
    static func text(_ page: JobsListRequest.Result) -> String {
        guard !page.jobs.isEmpty else { return "no jobs match" }
        var table = TextTable("ID", "KIND", "QUEUE", "STATE", "ATTEMPT", "CREATED", "LAST ERROR", numeric: [0])
        for job in page.jobs {
            let error = job.lastError.map { error in
                let message = error.error.count > 80 ? error.error.prefix(79) + "…" : Substring(error.error)
                return [error.code, String(message)].compactMap { $0 }.joined(separator: ": ")
            } ?? ""
            table.append("\(job.id)", job.kind, job.queue, job.state.rawValue, "\(job.attempt)/\(job.maxAttempts)",
                         job.createdAt.formatted(.iso8601), error)
        }
        guard let cursor = page.nextCursor else { return table.text }
        return table.text + "\n(more: --cursor \(cursor))"
    }
}
