import ArgumentParser
import DispatcherProtocol
import FleetSupport
import Foundation

/// `fleet-bench enqueue`: single enqueues as backends send them, one job per request over the
/// dispatcher's TCP socket, one request in flight per connection, from 1, 8, 64 and 256
/// connections: a dispatcher with group commit on against one with it off
/// (`FLEET_DISPATCHER_GROUP_COMMIT=off`: a commit per job), alternating, and pgqueuer's single
/// enqueue on the same server, in the same run.
struct EnqueueSuite: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "enqueue",
        abstract: "Single enqueues over the dispatcher's socket, group commit on and off, against pgqueuer's single enqueue.")

    @OptionGroup var options: SuiteOptions
    @Option(parsing: .upToNextOption, help: "Connection counts to measure.") var connections = [1, 8, 64, 256]
    @Option(help: "Seconds measured per window (after a half-second warm-up).") var seconds = 5.0
    @Flag(help: "Measure the fleet only, not pgqueuer.") var skipPeers = false

    private static let token = "fleet-bench-enqueue-token"

    func run() async throws {
        let database = try await BenchDatabase.prepare()
        let peer = skipPeers ? nil : try await PgqueuerPeer.prepare(databaseURL: database.url)
        let on = try await BenchDispatcher.start(databaseURL: database.url, token: Self.token, groupCommit: true)
        let off = try await BenchDispatcher.start(databaseURL: database.url, token: Self.token, groupCommit: false)
        defer { on.stop(); off.stop() }
        var report = Report()
        for round in 1...max(1, options.repeats) {
            // Alternate which goes first, so that neither always follows the other's vacuum debt.
            let order = round % 2 == 1 ? [("on", on), ("off", off)] : [("off", off), ("on", on)]
            for count in connections {
                for (name, dispatcher) in order {
                    try await database.pool.query("TRUNCATE jobs")
                    let window = try await EnqueueLoad(port: dispatcher.port, token: Self.token, connections: count).measure(
                        warmUp: .milliseconds(500), window: .milliseconds(Int64(seconds * 1000)), serverPID: dispatcher.process.pid)
                    record(window, as: "\(count).\(name)", in: &report)
                    progress("round \(round)/\(options.repeats), \(count) connections, group commit \(name): "
                        + String(format: "%.0f jobs/s, p99 %.2f ms", window.rate, window.p99))
                }
                if let peer {
                    let window = try await peer.singleEnqueue(connections: count, seconds: seconds)
                    record(window, as: "\(count).pgqueuer", in: &report)
                    progress("round \(round)/\(options.repeats), \(count) connections, pgqueuer: " + String(format: "%.0f jobs/s", window.rate))
                }
            }
        }
        try await database.pool.query("TRUNCATE jobs")
        if options.json {
            printJSONLines(report.medians)
            return
        }
        print(try await table(report, server: try await database.settings()))
    }

    private func record(_ window: SingleEnqueueWindow, as name: String, in report: inout Report) {
        report.add("enqueue.\(name).rate", window.rate, unit: "jobs/s")
        report.add("enqueue.\(name).p50", window.p50, unit: "ms")
        report.add("enqueue.\(name).p99", window.p99, unit: "ms")
        report.add("enqueue.\(name).client_cpu", window.clientCPUPerJob, unit: "ms/job")
        if let server = window.serverCPUPerJob { report.add("enqueue.\(name).server_cpu", server, unit: "ms/job") }
    }

    private func table(_ report: Report, server: String) async throws -> String {
        func cell(_ metric: String, _ format: String = "%.0f") -> String {
            report.median(metric).map { String(format: format, $0) } ?? "-"
        }
        var rows: [[String]] = []
        for count in connections {
            for name in ["on", "off", "pgqueuer"] where report.median("enqueue.\(count).\(name).rate") != nil {
                let prefix = "enqueue.\(count).\(name)"
                let ratio = report.median("\(prefix).rate").flatMap { rate in report.median("enqueue.\(count).off.rate").map { rate / $0 } }
                rows.append([
                    "\(count)", name == "pgqueuer" ? "pgqueuer" : "group commit \(name)", cell("\(prefix).rate"),
                    ratio.map { String(format: "%.2fx", $0) } ?? "-", cell("\(prefix).p50", "%.2f"), cell("\(prefix).p99", "%.2f"),
                    cell("\(prefix).server_cpu", "%.3f"), cell("\(prefix).client_cpu", "%.3f"),
                ])
            }
        }
        var output = ""
        let header = ["connections", "system", "jobs/s", "vs off", "p50 ms", "p99 ms", "server CPU ms/job", "client CPU ms/job"]
        let widths = header.indices.map { column in ([header] + rows).map { $0[column].count }.max() ?? 0 }
        func line(_ values: [String]) -> String {
            values.enumerated().map { $1.padding(toLength: widths[$0], withPad: " ", startingAt: 0) }.joined(separator: "  ")
        }
        output += "enqueue suite: single enqueues, one in flight per connection, medians of \(options.repeats) alternating rounds of \(seconds) s\n"
        output += line(header) + "\n" + widths.map { String(repeating: "-", count: $0) }.joined(separator: "  ") + "\n"
        output += rows.map(line).joined(separator: "\n") + "\n"
        output += """
            targets: 64 connections ≥ 25,000 jobs/s, ≥ 5x off, p99 ≤ 10 ms; 1 connection p99 no worse than off
            server CPU: the dispatcher process; client CPU: the load generator (this process, NIO) or pgqueuer's Python process
            server: \(server)
            """
        return output
    }
}

/// A release `dispatcher` process next to this executable, on its own TCP port, serving the
/// bench's database.
struct BenchDispatcher {
    let process: ChildProcess
    let port: Int

    /// The `dispatcher` next to this executable.
    static var besideThisOne: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("dispatcher").path
    }

    /// `executable` (`besideThisOne` by default) started as `run`, or given as an argument to
    /// `wrapper` (`valgrind …`), which may take long to start: `readyWithin` bounds the wait.
    static func start(
        databaseURL: String, token: String, groupCommit: Bool, executable: String = besideThisOne, wrapper: [String] = [],
        readyWithin: Duration = .seconds(60)
    ) async throws -> BenchDispatcher {
        let port = try freeTCPPort()
        let command = wrapper + [executable, "run"]
        let process = try ChildProcess(command[0], Array(command.dropFirst()), environment: ProcessInfo.processInfo.environment.merging([
            "DATABASE_URL": databaseURL, "FLEET_DISPATCHER_TCP": "127.0.0.1:\(port)", "FLEET_DISPATCHER_SOCKET": "off",
            "FLEET_DISPATCHER_TOKEN": token, "FLEET_HTTP_ADDRESS": "off", "FLEET_LOG_LEVEL": "warning",
            "FLEET_DISPATCHER_GROUP_COMMIT": groupCommit ? "on" : "off",
        ]) { $1 }, outputPath: NSTemporaryDirectory() + "fleet-bench-dispatcher-\(groupCommit ? "on" : "off").log")
        let dispatcher = BenchDispatcher(process: process, port: port)
        let deadline = ContinuousClock.now + readyWithin
        while ContinuousClock.now < deadline {
            if let status = process.exitStatus { throw BenchError("the dispatcher exited with \(status) (see its log in \(NSTemporaryDirectory()))") }
            if let client = try? await DispatcherClient.connect(to: .tcp(host: "127.0.0.1", port: port), token: token) {
                await client.close()
                return dispatcher
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw BenchError("the dispatcher did not listen on \(port) within \(readyWithin)")
    }

    func stop() {
        process.signal(SIGTERM)
    }
}

/// A TCP port free on loopback now (the kernel's pick for port 0).
func freeTCPPort() throws -> Int {
    let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard socket >= 0 else { throw BenchError("socket: \(String(cString: strerror(errno)))") }
    defer { close(socket) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, length) == 0 && getsockname(socket, $0, &length) == 0 }
    }
    guard bound else { throw BenchError("bind: \(String(cString: strerror(errno)))") }
    return Int(UInt16(bigEndian: address.sin_port))
}
