import FakeProviders
import FleetHTTPClient
import FleetStorage
import Foundation

/// The Ceph RADOS gateway of `scripts/s3.sh` (a one-node cluster in memory), started once per
/// test process in `.data/s3-test` on `FLEET_TEST_S3_PORT` (17480; the monitor takes the next
/// port) and left running for the next run, as the test PostgreSQL is. Its bucket and keys come
/// from the script's `url` lines.
enum S3Gateway {
    typealias Connection = LocalS3Gateway

    static func connection() async throws -> Connection {
        try await started.value
    }

    private static let started = Task<Connection, any Error> {
        let port = ProcessInfo.processInfo.environment["FLEET_TEST_S3_PORT"].flatMap(Int.init) ?? 17480
        return try await LocalS3Gateway.start(
            script: packageRoot.appendingPathComponent("scripts/s3.sh").path,
            folder: packageRoot.appendingPathComponent(".data/s3-test").path, port: port)
    }
}

extension LocalS3Gateway {
    /// A process's variables for the gateway's bucket under `prefix`, its requests sent through
    /// `proxy` (which counts them, or answers for a gateway that is down).
    func environment(prefix: String, through proxy: S3FaultProxy) -> [String: String] {
        environment(prefix: prefix).merging(["AWS_ENDPOINT_URL_S3": "http://127.0.0.1:\(proxy.server.port)"]) { $1 }
    }

    /// A request to `key` signed in its `Authorization` header (with the gateway's keys unless told).
    func signed(
        _ method: HTTPClientRequest.Method, key: String, body: Data? = nil, credentials: S3Credentials? = nil
    ) -> HTTPClientRequest {
        let signer = SigV4Signer(credentials: credentials ?? self.credentials, region: endpoint.region)
        let path = endpoint.path(ofKey: key)
        let request = SigV4Request(method: method.rawValue, path: path, headers: [("host", endpoint.hostHeader)])
        let headers = signer.authorizationHeaders(for: request, payloadHash: SigV4Signer.payloadHash(body ?? Data()), at: Date())
        return HTTPClientRequest(method: method, url: endpoint.url(path: path, canonicalQuery: ""), headers: headers, body: body)
    }
}
