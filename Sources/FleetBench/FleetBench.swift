import ArgumentParser

@main
struct FleetBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "fleet-bench", abstract: "Benchmarks of the fleet against its peers.")
    func run() async throws {}
}
