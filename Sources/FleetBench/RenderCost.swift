import Foundation

/// `fleet-bench render --cost`: what a render costs PostgreSQL. Each round resets the statement
/// counts, reads the server's counters, keeps the loop's renders in flight for the window,
/// drains them (every render requested in the window ends in it), waits for the statistics to
/// be reported, and reads again: the difference divided by the renders is what each cost. The
/// benchmark itself reads nothing in between (its only transaction there is the first reading's
/// own, taken out). The fleet's background (its workers' polls and heartbeats, the admission
/// estimate's refresh) is measured over an idle stretch first and taken out per second: it is
/// paid whatever the load, and a loaded machine stretching the window must not charge it to
/// the renders.
struct RenderCostRun {
    let loop: ClosedLoop
    let meter: ServerCostMeter
    let idleSeconds: Double
    let seconds: Double
    let latency: Double
    let repeats: Int

    /// Longer than PostgreSQL 15's delay before an idle backend reports the counts it holds
    /// (`PGSTAT_IDLE_INTERVAL`, 10 s): a shorter wait charges one stretch's transactions to the next.
    static let statisticsSettle = Duration.seconds(11)

    struct Result {
        var report = Report()
        var statements: [ServerCostMeter.Statement] = []
        var renders = 0
        var backgroundCommitsPerSecond = 0.0

        func print(json: Bool, title: String) {
            if json {
                printJSONLines(report.medians)
                return
            }
            func value(_ metric: String, _ format: String) -> String {
                report.median(metric).map { String(format: format, $0) } ?? "-"
            }
            printGrid(title: title, header: ["per render", "value", "unit"], rows: [
                ["transactions (xact_commit), background taken out", value("render.cost.commits", "%.2f"), "commits"],
                ["transactions (xact_commit), as counted", value("render.cost.commits_raw", "%.2f"), "commits"],
                ["rollbacks", value("render.cost.rollbacks", "%.3f"), "rollbacks"],
                ["WAL, background taken out", value("render.cost.wal_bytes", "%.0f"), "bytes"],
                ["WAL records, background taken out", value("render.cost.wal_records", "%.1f"), "records"],
                ["server CPU, background taken out (noisy: a loaded machine inflates it)", value("render.cost.server_cpu", "%.2f"), "ms"],
                ["renders measured (per round)", value("render.cost.renders", "%.0f"), "renders"],
                ["fleet background while idle", String(format: "%.1f", backgroundCommitsPerSecond), "commits/s"],
            ])
            guard !statements.isEmpty else {
                Swift.print("statements: pg_stat_statements is not in shared_preload_libraries")
                return
            }
            Swift.print("")
            printGrid(title: "statements of the last round by total time (per render; background included)",
                      header: ["ms", "calls", "statement"], rows: statements.map {
                [String(format: "%.3f", $0.milliseconds / Double(renders)), String(format: "%.2f", $0.calls / Double(renders)), $0.query]
            })
        }
    }

    func run() async throws -> Result {
        var result = Result()
        try await loop.drain(timeout: .seconds(latency * 4 + 60))
        try await meter.resetStatements()
        try await Task.sleep(for: Self.statisticsSettle)
        let idleStart = try await meter.read()
        try await Task.sleep(for: .seconds(idleSeconds))
        let idle = try await meter.read() - idleStart
        let idleElapsed = (idle.at - idleStart.at).seconds
        for statement in try await meter.topStatements(limit: 5) {
            progress(String(format: "idle: %.1f calls/s, %.2f ms/s: ", statement.calls / idleElapsed, statement.milliseconds / idleElapsed) + statement.query)
        }
        // The first reading's own transaction is in the difference.
        let background = ServerCounters(
            commits: (idle.commits - 1) / idleElapsed, rollbacks: idle.rollbacks / idleElapsed, walBytes: idle.walBytes / idleElapsed,
            walRecords: idle.walRecords / idleElapsed, cpuSeconds: idle.cpuSeconds.map { $0 / idleElapsed }, at: idle.at)
        result.backgroundCommitsPerSecond = background.commits
        progress(String(format: "fleet background while idle: %.1f commits/s, %.0f WAL bytes/s", background.commits, background.walBytes))
        for round in 1...repeats {
            try await meter.resetStatements()
            // So that the reset's own transaction is reported before the first reading.
            try await Task.sleep(for: Self.statisticsSettle)
            let before = try await meter.read()
            _ = await loop.takeAccepted()
            try await loop.fill(over: .seconds(latency))
            try await Task.sleep(for: .seconds(seconds))
            try await loop.drain(timeout: .seconds(latency * 4 + 60))
            let renders = await loop.takeAccepted()
            try await Task.sleep(for: Self.statisticsSettle)
            let spent = try await meter.read() - before
            guard renders > 0 else { throw BenchError("no render was accepted in round \(round)") }
            let elapsed = (spent.at - before.at).seconds
            let perRender = Double(renders)
            let commits = spent.commits - 1
            result.report.add("render.cost.commits", (commits - background.commits * elapsed) / perRender, unit: "commits")
            result.report.add("render.cost.commits_raw", commits / perRender, unit: "commits")
            result.report.add("render.cost.rollbacks", spent.rollbacks / perRender, unit: "rollbacks")
            result.report.add("render.cost.wal_bytes", (spent.walBytes - background.walBytes * elapsed) / perRender, unit: "bytes")
            result.report.add("render.cost.wal_records", (spent.walRecords - background.walRecords * elapsed) / perRender, unit: "records")
            if let cpu = spent.cpuSeconds, let idleCPU = background.cpuSeconds {
                result.report.add("render.cost.server_cpu", (cpu - idleCPU * elapsed) * 1000 / perRender, unit: "ms")
            }
            result.report.add("render.cost.renders", perRender, unit: "renders")
            result.statements = try await meter.topStatements(limit: 16)
            result.renders = renders
            progress(String(format: "round %d/%d: %d renders, %.2f commits a render (%.2f as counted)", round, repeats, renders,
                            (commits - background.commits * elapsed) / perRender, commits / perRender))
        }
        return result
    }
}
