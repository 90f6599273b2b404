import Foundation
import Shared

/// pgqueuer (PyPI), driven by `peers/pgqueuer_driver.py` in a virtualenv the bench creates
/// under `.bench/venv`, on the same database server as the fleet.
struct PgqueuerPeer: QueueSystem {
    static let requirements = ["pgqueuer==1.6.0", "asyncpg==0.32.0"]
    let python: String
    let driver: String
    let databaseURL: String
    var settingsNote: String { "see peers/pgqueuer_driver.py (\(PgqueuerPeer.requirements.joined(separator: ", ")))" }

    static func prepare(databaseURL: String) async throws -> PgqueuerPeer {
        let venv = packageRoot.appendingPathComponent(".bench/venv").path
        let python = venv + "/bin/python"
        let log = NSTemporaryDirectory() + "fleet-bench-venv.log"
        if !FileManager.default.fileExists(atPath: python) {
            progress("creating the pgqueuer virtualenv in .bench/venv")
            guard try await ChildProcess.run("/usr/bin/env", ["python3", "-m", "venv", venv], outputPath: log) == 0 else {
                throw BenchError("python3 -m venv failed (see \(log))")
            }
        }
        guard try await ChildProcess.run(python, ["-m", "pip", "install", "-q"] + requirements, outputPath: log) == 0 else {
            throw BenchError("pip install \(requirements.joined(separator: " ")) failed (see \(log))")
        }
        let peer = PgqueuerPeer(python: python, driver: packageRoot.appendingPathComponent("Sources/FleetBench/peers/pgqueuer_driver.py").path,
                                databaseURL: databaseURL)
        _ = try await peer.call(["install"])
        return peer
    }

    func enqueueRate(jobs: Int, batch: Int) async throws -> Double {
        try await value(of: call(["enqueue", "--jobs", "\(jobs)", "--batch", "\(batch)"]), "value")
    }

    func drainRate(jobs: Int, workers: Int) async throws -> Double {
        try await value(of: call(["drain", "--jobs", "\(jobs)", "--workers", "\(workers)"]), "value")
    }

    func startLatency(samples: Int) async throws -> (p50: Double, p99: Double) {
        let result = try await call(["latency", "--samples", "\(samples)"])
        return (try value(of: result, "p50_ms"), try value(of: result, "p99_ms"))
    }

    /// Runs one driver command; its last stdout line is a JSON object.
    private func call(_ arguments: [String]) async throws -> [String: JSONValue] {
        let output = NSTemporaryDirectory() + "pgqueuer-\(UUID().uuidString.prefix(8)).out"
        defer { try? FileManager.default.removeItem(atPath: output) }
        let status = try await ChildProcess.run(python, [driver, "--dsn", databaseURL] + arguments, outputPath: output)
        let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        guard status == 0, let last = text.split(separator: "\n").last(where: { $0.hasPrefix("{") }),
              case .object(let object) = try JSONValue(json: String(last)) else {
            throw BenchError("pgqueuer driver \(arguments.first ?? "") failed (exit \(status)): \(text.suffix(2000))")
        }
        return object
    }

    private func value(of result: [String: JSONValue], _ key: String) throws -> Double {
        guard let value = result[key]?.doubleValue else { throw BenchError("pgqueuer driver gave no \(key): \(result)") }
        return value
    }
}
