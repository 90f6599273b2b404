import FleetSupport
import Foundation

/// The path of one of the package's executables, built beside the test bundle.
func builtExecutable(_ name: String) -> String {
    let beside = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent(name).path
    return FileManager.default.fileExists(atPath: beside) ? beside : packageRoot.appendingPathComponent(".build/debug/\(name)").path
}

/// A worker process (`fleet-drill` unless told otherwise), started from the build folder.
final class WorkerProcess: Sendable {
    let child: ChildProcess
    let logPath: String

    init(databaseURL: String, executable: String = "fleet-drill", executionLog: String? = nil, environment: [String: String] = [:]) throws {
        let binary = builtExecutable(executable)
        var env = ProcessInfo.processInfo.environment
        env["DATABASE_URL"] = databaseURL
        env["FLEET_LOG_LEVEL"] = env["FLEET_LOG_LEVEL"] ?? "warning"
        env["FLEET_POLL_INTERVAL_MS"] = "200"
        env["FLEET_RETRY_BASE_MS"] = "50"
        for (key, value) in environment { env[key] = value }
        logPath = temporaryPath("fleet-drill") + ".log"
        child = try ChildProcess(binary, executionLog.map { ["--execution-log", $0] } ?? [], environment: env, outputPath: logPath)
    }

    func signal(_ signal: Int32) { child.signal(signal) }

    func wait(timeout: Duration = .seconds(30)) async -> Int32? { await child.wait(timeout: timeout) }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }
}


/// One line of an execution log: a job's id and the attempt that ran.
struct ExecutionLine: Hashable {
    let id: Int64
    let attempt: Int
}

func executionLines(_ path: String) -> [ExecutionLine] {
    let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    return text.split(separator: "\n").compactMap { line in
        let fields = line.split(separator: " ")
        guard fields.count == 2, let id = Int64(fields[0]), let attempt = Int(fields[1]) else { return nil }
        return ExecutionLine(id: id, attempt: attempt)
    }
}

func temporaryPath(_ name: String) -> String {
    FileManager.default.temporaryDirectory.appendingPathComponent("\(name)-\(UUID().uuidString.prefix(8))").path
}
