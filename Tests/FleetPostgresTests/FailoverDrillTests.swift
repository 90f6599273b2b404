import FleetSupport
@testable import FleetTestSupport
import Foundation
import Testing

/// `scripts/failover-drill.sh --short`: a primary and its streaming standby on loopback, the
/// fleet on a URL naming both (`target_session_attrs=read-write`), a mixed load over the
/// dispatcher's socket, the primary's WAL sender stopped for a second (the standby behind, as over
/// a real link), the primary stopped with `-m immediate` and the standby promoted. With a
/// synchronous standby nothing a client was given an id for is lost, nothing is charged twice,
/// the fleet (not restarted) claims and enqueues again within 10 s of the promotion, and the
/// waits pending across it are answered. With an asynchronous one the same second loses what the
/// primary acknowledged meanwhile (reported), and still nothing is charged twice.
@Suite(.serialized) struct FailoverDrillTests {
    @Test func synchronousStandbyLosesNothingAcknowledgedAndTheFleetResumes() async throws {
        let figures = try await drill(["--short"])
        #expect(figures["failover.sync.acknowledged_jobs"]! > 100)
        #expect(figures["failover.sync.acknowledged_renders"]! > 5)
        #expect(figures["failover.sync.lost"] == 0)
        #expect(figures["failover.sync.duplicated"] == 0)
        #expect(figures["failover.sync.not_ended"] == 0)
        let claim = figures["failover.sync.first_claim_after_promotion"]!, enqueue = figures["failover.sync.first_enqueue_after_promotion"]!
        #expect((0...10).contains(claim), "first claim \(claim) s after the promotion")
        #expect((0...10).contains(enqueue), "first enqueue \(enqueue) s after the promotion")
        #expect(figures["failover.sync.waits_answered"] == 6)
    }

    @Test func asynchronousStandbyLosesWhatItHadNotReceivedAndChargesNothingTwice() async throws {
        let figures = try await drill(["--short", "--async"])
        #expect(figures["failover.async.lost"]! > 0, "nothing lost: the standby was not behind, and the synchronous run proves nothing")
        #expect(figures["failover.async.duplicated"] == 0)
        #expect(figures["failover.async.not_ended"] == 0)
        print("async failover: lost \(Int(figures["failover.async.lost"]!)) acknowledged, resumed in "
              + "\(figures["failover.async.first_claim_after_promotion"]!) s (claim), \(figures["failover.async.first_enqueue_after_promotion"]!) s (enqueue)")
    }

    /// Runs the drill with the executables built beside the tests; its JSON figures by metric.
    private func drill(_ arguments: [String]) async throws -> [String: Double] {
        let output = temporaryPath("failover-drill") + ".log"
        defer { try? FileManager.default.removeItem(atPath: output) }
        var environment = ProcessInfo.processInfo.environment
        environment["FLEET_BIN"] = URL(fileURLWithPath: builtExecutable("fleet-bench")).deletingLastPathComponent().path
        environment["FLEET_FAILOVER_DIR"] = packageRoot.appendingPathComponent(".data/test-failover").path
        let status = try await ChildProcess.run(packageRoot.appendingPathComponent("scripts/failover-drill.sh").path,
                                                arguments + ["--json"], environment: environment, outputPath: output)
        let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        print(text.split(separator: "\n").filter { !$0.hasPrefix("{") }.joined(separator: "\n"))
        var figures: [String: Double] = [:]
        for line in text.split(separator: "\n") where line.hasPrefix("{") {
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  let metric = object["metric"] as? String, let value = (object["value"] as? NSNumber)?.doubleValue else { continue }
            figures[metric] = value
        }
        #expect(status == 0, "scripts/failover-drill.sh exited \(status)")
        guard !figures.isEmpty else { throw TestFailure("no figures from the drill: \(text.suffix(2000))") }
        return figures
    }
}
