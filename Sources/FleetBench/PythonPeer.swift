import FleetSupport
import Foundation

/// A peer written in Python: a driver script in `peers/`, run in the virtualenv the bench
/// keeps under `.bench/venv`, answering with one JSON object on its last line.
struct PythonPeer {
    let python: String
    let script: String

    /// Creates the virtualenv if needed and installs the pinned `requirements`.
    static func prepare(script: String, requirements: [String]) async throws -> PythonPeer {
        let venv = packageRoot.appendingPathComponent(".bench/venv").path
        let python = venv + "/bin/python"
        let log = NSTemporaryDirectory() + "fleet-bench-venv.log"
        if !FileManager.default.fileExists(atPath: python) {
            progress("creating the peers' virtualenv in .bench/venv")
            guard try await ChildProcess.run("/usr/bin/env", ["python3", "-m", "venv", venv], outputPath: log) == 0 else {
                throw BenchError("python3 -m venv failed (see \(log))")
            }
        }
        guard try await ChildProcess.run(python, ["-m", "pip", "install", "-q"] + requirements, outputPath: log) == 0 else {
            throw BenchError("pip install \(requirements.joined(separator: " ")) failed (see \(log))")
        }
        return PythonPeer(python: python, script: packageRoot.appendingPathComponent("Sources/FleetBench/peers/\(script)").path)
    }

    /// Runs the script; returns its last JSON line and the process's peak memory.
    func call(_ arguments: [String]) async throws -> (result: [String: JSONValue], peakRSSKilobytes: Int) {
        let output = NSTemporaryDirectory() + "peer-\(UUID().uuidString.prefix(8)).out"
        defer { try? FileManager.default.removeItem(atPath: output) }
        let process = try ChildProcess(python, [script] + arguments, environment: ProcessInfo.processInfo.environment, outputPath: output)
        let status = await process.wait() ?? -1
        let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        guard status == 0, let last = text.split(separator: "\n").last(where: { $0.hasPrefix("{") }),
              case .object(let object) = try JSONValue(json: String(last)) else {
            throw BenchError("\(script) \(arguments.first ?? "") failed (exit \(status)): \(text.suffix(2000))")
        }
        return (object, process.peakRSSKilobytes ?? 0)
    }
}

/// A number from a peer's answer.
func number(_ result: [String: JSONValue], _ key: String) throws -> Double {
    guard let value = result[key]?.doubleValue else { throw BenchError("peer answered without \(key): \(result)") }
    return value
}
