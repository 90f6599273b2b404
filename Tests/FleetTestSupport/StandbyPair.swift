import FleetSupport
import Foundation

/// A primary and its asynchronous streaming standby (`scripts/pg.sh start`, then `standby`:
/// `pg_basebackup -R`), on the first free ports from `FLEET_TEST_STANDBY_PG_PORT` (15410).
struct StandbyPair: Sendable {
    let primaryDir: String
    let standbyDir: String
    let primaryPort: Int
    let standbyPort: Int

    var primaryURL: String { "postgresql://postgres@127.0.0.1:\(primaryPort)/wearbloom" }
    var standbyURL: String { "postgresql://postgres@127.0.0.1:\(standbyPort)/wearbloom" }

    static func start(name: String) async throws -> StandbyPair {
        let base = packageRoot.appendingPathComponent(".data/\(name)").path
        let primaryDir = base + "-primary", standbyDir = base + "-standby"
        // A fresh primary each time (the standby is always a fresh copy).
        _ = try? await pgScript("stop", "--mode", "immediate", "--dir", primaryDir)
        let clusterDir = try await pgScript("dir", "--dir", primaryDir).trimmingCharacters(in: .whitespacesAndNewlines)
        try? FileManager.default.removeItem(atPath: clusterDir)
        let first = ProcessInfo.processInfo.environment["FLEET_TEST_STANDBY_PG_PORT"] ?? "15410"
        let primaryPort = try await port(dir: primaryDir, from: first)
        _ = try await pgScript("start", "--dir", primaryDir, "--port", "\(primaryPort)")
        let standbyPort = try await port(dir: standbyDir, from: "\(primaryPort + 1)")
        _ = try await pgScript("standby", "--dir", standbyDir, "--port", "\(standbyPort)", "--primary-port", "\(primaryPort)")
        return StandbyPair(primaryDir: primaryDir, standbyDir: standbyDir, primaryPort: primaryPort, standbyPort: standbyPort)
    }

    func stop() async {
        _ = try? await Self.pgScript("stop", "--dir", standbyDir, "--port", "\(standbyPort)")
        _ = try? await Self.pgScript("stop", "--dir", primaryDir, "--port", "\(primaryPort)")
    }

    private static func port(dir: String, from: String) async throws -> Int {
        let output = try await pgScript("pick-port", "--dir", dir, "--port", from)
        guard let port = Int(output.trimmingCharacters(in: .whitespacesAndNewlines)) else { throw TestFailure("pick-port said \(output)") }
        return port
    }

    /// Runs `scripts/pg.sh`; its output, or a failure with it.
    @discardableResult
    private static func pgScript(_ arguments: String...) async throws -> String {
        let log = temporaryPath("pg-script") + ".log"
        defer { try? FileManager.default.removeItem(atPath: log) }
        let status = try await ChildProcess.run(packageRoot.appendingPathComponent("scripts/pg.sh").path, arguments, outputPath: log)
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        guard status == 0 else { throw TestFailure("scripts/pg.sh \(arguments.joined(separator: " ")) exited \(status): \(output.suffix(1500))") }
        return output
    }
}
