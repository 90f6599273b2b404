import DispatcherProtocol
import FleetSupport
import Foundation
import Synchronization

/// The real `dispatcher` executable on a fixed loopback port, which a test kills and starts
/// again on the same port (clients reconnecting, the queue surviving).
final class DispatcherProcess: Sendable {
    static let token = "reconnection-test-token-0123456789"
    let address: DispatcherAddress
    /// Its HTTP listener's port (probes, metrics, webhooks, the console when asked for).
    let httpPort: Int
    let logPath = temporaryPath("dispatcher") + ".log"
    private let environment: [String: String]
    private let child: Mutex<ChildProcess?>

    init(databaseURL: String, environment extra: [String: String] = [:]) throws {
        let port = try freePort()
        address = .tcp(host: "127.0.0.1", port: port)
        var environment = ProcessInfo.processInfo.environment
        environment["DATABASE_URL"] = databaseURL
        environment["FLEET_LOG_LEVEL"] = "warning"
        environment["FLEET_DISPATCHER_TCP"] = "127.0.0.1:\(port)"
        environment["FLEET_DISPATCHER_SOCKET"] = "off"
        environment["FLEET_DISPATCHER_TOKEN"] = Self.token
        httpPort = try freePort()
        environment["FLEET_HTTP_ADDRESS"] = "127.0.0.1:\(httpPort)"
        for (key, value) in extra { environment[key] = value }
        self.environment = environment
        child = Mutex(nil)
    }

    /// Starts the process and returns once it answers on its port.
    func start() async throws {
        let started = try ChildProcess(builtExecutable("dispatcher"), ["run"], environment: environment, outputPath: logPath)
        child.withLock { $0 = started }
        let deadline = ContinuousClock.now + .seconds(60)
        while true {
            if let client = try? await DispatcherClient.connect(to: address, token: Self.token, reconnect: .disabled) {
                await client.close()
                return
            }
            guard started.exitStatus == nil, ContinuousClock.now < deadline else {
                throw TestFailure("the dispatcher did not start: \(log.suffix(2000))")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    func signal(_ signal: Int32) { child.withLock { $0?.signal(signal) } }

    /// Whether SIGSTOP has stopped every thread of the process.
    var isStopped: Bool { child.withLock { $0?.isStopped ?? false } }

    /// The exit status once the process has ended; nil if it is still running after `timeout`.
    func wait(timeout: Duration) async -> Int32? {
        let running = child.withLock { $0 }
        return await running?.wait(timeout: timeout)
    }

    /// SIGKILL, and waits until the kernel has reaped it (its port is free again).
    func kill() async {
        let running = child.withLock { $0 }
        running?.signal(SIGKILL)
        _ = await running?.wait(timeout: .seconds(10))
    }

    func client(poolSize: Int = 1, reconnect: ReconnectPolicy = .default) async throws -> DispatcherClient {
        try await DispatcherClient.connect(to: address, token: Self.token, poolSize: poolSize, reconnect: reconnect)
    }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }
}
