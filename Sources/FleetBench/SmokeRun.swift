import ArgumentParser
import DispatcherCore
import FleetPostgres
import FleetQueue
import Foundation

/// `fleet-bench smoke`: sends drill jobs through a running fleet and summarises their end.
struct SmokeRun: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "smoke", abstract: "Send drill jobs through a running fleet (DATABASE_URL) and print how they ended.")

    @Option(help: "How many drill.noop jobs to send.") var jobs = 2_000
    @Option(help: "Give up after this many seconds.") var timeout = 120

    func run() async throws {
        let url = ProcessInfo.processInfo.environment["DATABASE_URL"] ?? ""
        let pool = PostgresPool(conninfo: url, maxConnections: 2, applicationName: "fleet-bench-smoke")
        let queue = JobQueue(executor: pool, knownKinds: FleetKinds.all)
        let started = ContinuousClock.now
        let ids = try await queue.enqueue(Array(repeating: NewJob(kind: .drillNoop), count: jobs)).map(\.id)
        let deadline = started + .seconds(timeout)
        var states: [String: Int] = [:]
        repeat {
            try await Task.sleep(for: .milliseconds(100))
            states = [:]
            for row in try await pool.query("SELECT state::text AS state, count(*) AS n FROM jobs WHERE id = ANY($1) GROUP BY 1",
                                            [PostgresArray(ids)]).rows {
                states[try row.string("state")] = try row.int("n")
            }
            progress("done \(states["completed", default: 0]) of \(jobs)")
        } while states["completed", default: 0] + states["dead", default: 0] + states["cancelled", default: 0] < jobs
            && ContinuousClock.now < deadline
        let elapsed = (ContinuousClock.now - started).seconds
        print("jobs  completed  dead  still queued  seconds  jobs/s")
        print(String(format: "%4d  %9d  %4d  %12d  %7.2f  %6.0f", jobs, states["completed", default: 0], states["dead", default: 0],
                     states["available", default: 0] + states["running", default: 0], elapsed, Double(jobs) / elapsed))
        if states["completed", default: 0] != jobs { throw ExitCode.failure }
    }
}
