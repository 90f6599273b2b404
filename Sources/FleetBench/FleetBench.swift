import ArgumentParser
import DrillKinds
import Foundation

@main
struct FleetBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fleet-bench",
        abstract: "Benchmarks of the fleet, with its peers measured in the same run.",
        discussion: """
            Uses DATABASE_URL, or starts the embedded PostgreSQL (scripts/pg.sh, fsync on) when it is \
            unset. Each suite repeats its measurements and reports medians, and the ratio to the peer: \
            this machine is noisy, so compare ratios, not absolute figures. Run it built for release: \
            swift run -c release fleet-bench queue
            """,
        subcommands: [
            QueueSuite.self, EnqueueSuite.self, EnqueueCost.self, FrameFloor.self, PipelineSuite.self, PoolerSuite.self, OpsSuite.self, ConsoleSuite.self, LargeTableSuite.self, SoakSuite.self,
            ImageSuite.self, StorageSuite.self, RenderSuite.self, SmokeRun.self, ChaosRun.self, FailoverDrill.self, BenchWorker.self, ImageProbe.self,
        ])
}

/// Options every suite shares.
struct SuiteOptions: ParsableArguments {
    @Flag(help: "Print one JSON object per line ({\"metric\",\"value\",\"unit\"}) instead of a table.")
    var json = false

    @Option(help: "How many times to repeat each measurement; the median is reported.")
    var repeats = 3
}

/// The drill worker, started by the suites as separate processes.
struct BenchWorker: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "worker", abstract: "Run a drill worker process (started by the suites).", shouldDisplay: false)

    func run() async throws {
        try await DrillWorker.run(executable: "fleet-bench-worker", executionLog: nil)
    }
}

/// The package's root, found from this source file, for scripts/ and the peer drivers.
let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

/// Progress for long work goes to standard error, so --json output stays clean.
func progress(_ message: String) {
    FileHandle.standardError.write(Data("· \(message)\n".utf8))
}
