import FleetStorage
import FleetSupport
import Foundation

/// The Ceph RADOS gateway of `scripts/s3.sh` (a one-node cluster in memory), started once per
/// test process in `.data/s3-test` on `FLEET_TEST_S3_PORT` (17480; the monitor takes the next
/// port) and left running for the next run, as the test PostgreSQL is. Its bucket and keys come
/// from the script's `url` lines.
enum S3Gateway {
    struct Connection: Sendable {
        let endpoint: S3Endpoint
        let credentials: S3Credentials
    }

    static func connection() async throws -> Connection {
        try await started.value
    }

    private static let started = Task<Connection, any Error> {
        let port = ProcessInfo.processInfo.environment["FLEET_TEST_S3_PORT"] ?? "17480"
        let log = temporaryPath("s3-script") + ".log"
        defer { try? FileManager.default.removeItem(atPath: log) }
        let arguments = ["start", "--dir", packageRoot.appendingPathComponent(".data/s3-test").path, "--port", port]
        let status = try await ChildProcess.run(packageRoot.appendingPathComponent("scripts/s3.sh").path, arguments, outputPath: log)
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        guard status == 0 else { throw TestFailure("scripts/s3.sh start exited \(status): \(output.suffix(1500))") }
        return try connection(fromExports: output)
    }

    /// `export NAME=value` lines (what `scripts/s3.sh url` prints) as the gateway's endpoint and keys.
    private static func connection(fromExports output: String) throws -> Connection {
        var values: [String: String] = [:]
        for line in output.split(separator: "\n") where line.hasPrefix("export ") {
            let assignment = line.dropFirst("export ".count)
            guard let equals = assignment.firstIndex(of: "=") else { continue }
            values[String(assignment[..<equals])] = String(assignment[assignment.index(after: equals)...])
        }
        guard let endpoint = values["S3_ENDPOINT"].flatMap(URLComponents.init(string:)), let host = endpoint.host,
              let region = values["S3_REGION"], let bucket = values["S3_BUCKET"],
              let accessKey = values["S3_ACCESS_KEY_ID"], let secretKey = values["S3_SECRET_ACCESS_KEY"] else {
            throw TestFailure("scripts/s3.sh start printed no complete connection: \(output.suffix(600))")
        }
        return Connection(
            endpoint: S3Endpoint(scheme: .http, host: host, port: endpoint.port, region: region, bucket: bucket, addressing: .pathStyle),
            credentials: S3Credentials(accessKeyID: accessKey, secretAccessKey: secretKey)
        )
    }
}
