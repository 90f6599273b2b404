import ArgumentParser
import DrillKinds
import Foundation

@main
struct FleetDrill: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fleet-drill",
        abstract: "A worker process with synthetic job kinds, for queue tests, benchmarks and load drills.",
        discussion: """
            Runs the fleet's worker runtime with two synthetic kinds: drill.noop (does nothing) and \
            drill.script (sleeps, fails or ignores cancellation as its JSON payload says). Configured \
            like every worker (DATABASE_URL, FLEET_CONCURRENCY, FLEET_LEASE_SECONDS...; see \
            docs/configuration.md). Stops gracefully on SIGTERM or SIGINT.
            """)

    @Option(help: "Append 'jobId attempt' per execution to this file (tests count executions with it).")
    var executionLog: String?

    func run() async throws {
        try await DrillWorker.run(executable: "fleet-drill", executionLog: executionLog)
    }
}
