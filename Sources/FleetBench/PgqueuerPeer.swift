import FleetSupport
import Foundation

/// pgqueuer (PyPI), driven by `peers/pgqueuer_driver.py` in a virtualenv the bench creates
/// under `.bench/venv`, on the same database server as the fleet.
struct PgqueuerPeer: QueueSystem {
    static let requirements = ["pgqueuer==1.6.0", "asyncpg==0.32.0"]
    let peer: PythonPeer
    let databaseURL: String
    var settingsNote: String { "see peers/pgqueuer_driver.py (\(PgqueuerPeer.requirements.joined(separator: ", ")))" }

    static func prepare(databaseURL: String) async throws -> PgqueuerPeer {
        let peer = PgqueuerPeer(
            peer: try await PythonPeer.prepare(script: "pgqueuer_driver.py", requirements: requirements), databaseURL: databaseURL)
        _ = try await peer.call(["install"])
        return peer
    }

    func enqueueRate(jobs: Int, batch: Int) async throws -> Double {
        try number(await call(["enqueue", "--jobs", "\(jobs)", "--batch", "\(batch)"]), "value")
    }

    /// One job per enqueue call from each of `connections` connections, one call in flight each.
    func singleEnqueue(connections: Int, seconds: Double) async throws -> SingleEnqueueWindow {
        let result = try await call(["single", "--connections", "\(connections)", "--seconds", "\(seconds)"])
        return SingleEnqueueWindow(
            rate: try number(result, "value"), p50: try number(result, "p50_ms"), p99: try number(result, "p99_ms"),
            clientCPUPerJob: try number(result, "cpu_ms_per_job"), serverCPUPerJob: nil)
    }

    func drainRate(jobs: Int, workers: Int) async throws -> Double {
        try number(await call(["drain", "--jobs", "\(jobs)", "--workers", "\(workers)"]), "value")
    }

    func startLatency(samples: Int) async throws -> (p50: Double, p99: Double) {
        let result = try await call(["latency", "--samples", "\(samples)"])
        return (try number(result, "p50_ms"), try number(result, "p99_ms"))
    }

    private func call(_ arguments: [String]) async throws -> [String: JSONValue] {
        try await peer.call(["--dsn", databaseURL] + arguments).result
    }
}
