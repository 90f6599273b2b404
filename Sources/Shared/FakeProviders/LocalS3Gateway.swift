import FleetStorage
import FleetSupport
import Foundation

/// The one-node Ceph RADOS gateway of `scripts/s3.sh` on loopback, as the tests and the
/// benchmarks reach it: its bucket, region and keys, read from the script's `export` lines.
public struct LocalS3Gateway: Sendable {
    public let endpoint: S3Endpoint
    public let credentials: S3Credentials

    public init(endpoint: S3Endpoint, credentials: S3Credentials) {
        self.endpoint = endpoint
        self.credentials = credentials
    }

    /// Runs `scripts/s3.sh start` for the cluster in `folder` with its gateway on `port` (it
    /// starts what is not running and leaves a running one as it is) and reads what it printed.
    public static func start(script: String, folder: String, port: Int) async throws -> LocalS3Gateway {
        let log = NSTemporaryDirectory() + "s3-script-\(UUID().uuidString.prefix(8)).log"
        defer { try? FileManager.default.removeItem(atPath: log) }
        let status = try await ChildProcess.run(script, ["start", "--dir", folder, "--port", String(port)], outputPath: log)
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        guard status == 0 else { throw LocalS3GatewayError("\(script) start exited \(status): \(output.suffix(1500))") }
        return try LocalS3Gateway(exports: output)
    }

    /// The gateway `export NAME=value` lines describe (what `scripts/s3.sh url` prints).
    public init(exports output: String) throws {
        var values: [String: String] = [:]
        for line in output.split(separator: "\n") where line.hasPrefix("export ") {
            let assignment = line.dropFirst("export ".count)
            guard let equals = assignment.firstIndex(of: "=") else { continue }
            values[String(assignment[..<equals])] = String(assignment[assignment.index(after: equals)...])
        }
        guard let endpoint = values["S3_ENDPOINT"].flatMap(URLComponents.init(string:)), let host = endpoint.host,
              let region = values["S3_REGION"], let bucket = values["S3_BUCKET"],
              let accessKey = values["S3_ACCESS_KEY_ID"], let secretKey = values["S3_SECRET_ACCESS_KEY"] else {
            throw LocalS3GatewayError("scripts/s3.sh printed no complete connection: \(output.suffix(600))")
        }
        self.init(
            endpoint: S3Endpoint(scheme: .http, host: host, port: endpoint.port, region: region, bucket: bucket, addressing: .pathStyle),
            credentials: S3Credentials(accessKeyID: accessKey, secretAccessKey: secretKey))
    }

    /// The variables a process is given to keep its images in the gateway's bucket under `prefix`.
    public func environment(prefix: String) -> [String: String] {
        [
            "FLEET_STORAGE": "s3://\(endpoint.bucket)/\(prefix)",
            "AWS_ACCESS_KEY_ID": credentials.accessKeyID, "AWS_SECRET_ACCESS_KEY": credentials.secretAccessKey,
            "AWS_REGION": endpoint.region, "AWS_ENDPOINT_URL_S3": "http://\(endpoint.host):\(endpoint.port ?? 80)",
        ]
    }
}

/// The gateway could not be started or described.
public struct LocalS3GatewayError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
