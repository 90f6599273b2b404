import ArgumentParser
import FakeProviders
import FleetHTTPClient
import FleetObjectStore
import FleetStorage
import FleetSupport
import Foundation

/// Where a suite's worker keeps its images.
enum BenchStore: String, CaseIterable, Sendable {
    /// A temporary folder (`FLEET_STORAGE_ROOT`).
    case files
    /// The S3 gateway of `scripts/s3.sh` (`FLEET_STORAGE=s3://…` with the AWS variables).
    case s3
}

/// `fleet-bench render --storage`: one store, or both by turns.
enum RenderStorageChoice: String, ExpressibleByArgument, CaseIterable {
    case files, s3, both

    var stores: [BenchStore] {
        switch self {
        case .files: [.files]
        case .s3: [.s3]
        case .both: [.files, .s3]
        }
    }
}

/// Where a suite runs the S3 gateway.
struct GatewayOptions: ParsableArguments {
    @Option(help: "The S3 gateway's cluster folder (scripts/s3.sh --dir).")
    var gatewayFolder = packageRoot.appendingPathComponent(".data/s3-bench").path
    @Option(help: "The S3 gateway's port (its monitor takes the next one).")
    var gatewayPort = 17500

    func start() async throws -> BenchGateway { try await BenchGateway.start(folder: gatewayFolder, port: gatewayPort) }
}

/// The gateway of `scripts/s3.sh` for one run, in its own folder and port; stopped at the end
/// only when this run started it.
struct BenchGateway {
    let connection: LocalS3Gateway
    let folder: String
    let port: Int
    let startedHere: Bool

    static let script = packageRoot.appendingPathComponent("scripts/s3.sh").path

    static func start(folder: String, port: Int) async throws -> BenchGateway {
        let running = try await ChildProcess.run(script, ["status", "--dir", folder, "--port", String(port)]) == 0
        progress("gateway: scripts/s3.sh start --dir \(folder) --port \(port)\(running ? " (running already)" : "")")
        let connection = try await LocalS3Gateway.start(script: script, folder: folder, port: port)
        return BenchGateway(connection: connection, folder: folder, port: port, startedHere: !running)
    }

    /// Runs `scripts/s3.sh stop` to its end when this run started the gateway.
    func stopIfStarted() async {
        guard startedHere else { return }
        _ = try? await ChildProcess.run(Self.script, ["stop", "--dir", folder, "--port", String(port)])
    }
}

/// The stores of one run: a temporary folder, and a prefix of its own in the gateway's bucket.
struct BenchStores: Sendable {
    let root: String
    let gateway: LocalS3Gateway?
    let prefix: String

    init(name: String, gateway: LocalS3Gateway?) {
        root = NSTemporaryDirectory() + "fleet-bench-\(name)-\(getpid())"
        self.gateway = gateway
        prefix = "fleet-bench-\(name)/\(UUID().uuidString.prefix(8))"
    }

    /// The store as the benchmark itself writes and deletes in it (the bucket reached directly).
    func storage(_ store: BenchStore) -> any ImageStorage {
        switch store {
        case .files: FileImageStorage(root: root)
        case .s3: S3ImageStorage(client: S3Client(endpoint: connection.endpoint, credentials: connection.credentials, http: CurlHTTPClient()), prefix: prefix)
        }
    }

    /// The benchmark's environment with the variables naming `store` for a worker (any other
    /// store the benchmark was given is dropped); `endpointURL` puts a proxy before the gateway.
    func environment(_ store: BenchStore, endpointURL: String? = nil) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment.filter {
            !$0.key.hasPrefix("AWS_") && $0.key != "FLEET_STORAGE" && $0.key != "FLEET_STORAGE_ROOT"
        }
        switch store {
        case .files:
            environment["FLEET_STORAGE_ROOT"] = root
        case .s3:
            environment.merge(connection.environment(prefix: prefix)) { $1 }
            if let endpointURL { environment["AWS_ENDPOINT_URL_S3"] = endpointURL }
        }
        return environment
    }

    func removeFiles() { try? FileManager.default.removeItem(atPath: root) }

    private var connection: LocalS3Gateway {
        guard let gateway else { preconditionFailure("the S3 store is used without the gateway started") }
        return gateway
    }
}
