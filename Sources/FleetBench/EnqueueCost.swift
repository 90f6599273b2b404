import ArgumentParser
import FleetSupport
import Foundation

/// `fleet-bench enqueue-cost`: what one single enqueue costs the dispatcher, counted on a fixed
/// amount of work rather than timed. The connections send a window of `count` enqueues and one
/// of twice as many; the difference between the two windows, divided by `count`, is one
/// request's share with every fixed cost taken out (the window's start and end, the counters'
/// own collection).
struct EnqueueCost: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "enqueue-cost",
        abstract: "The dispatcher's CPU, system calls and context switches per single enqueue.",
        discussion: """
            Starts a release dispatcher (group commit on) on a fresh bench database, opens the \
            connections, sends the warm-up, then windows of N and 2N enqueues (one in flight per \
            connection), and reports (2N window - N window) / N for each counter. CPU is the \
            dispatcher's user + system time (/proc/PID/stat), also apart (cpu_user_us, cpu_system_us: \
            the kernel's share): it moves with whatever else runs. \
            With --perf, `perf stat` attached to the dispatcher also counts its system calls and \
            context switches (a task or thread woken is a switch), which hold still on a busy \
            machine. With --callgrind, the dispatcher runs under valgrind's callgrind \
            (scripts/callgrind.sh) and its instructions are counted per window, the same figure \
            whatever else runs (this machine's virtual CPUs expose no hardware counters to perf); \
            each window's profile is kept for callgrind_annotate. With --floor, the server is \
            `fleet-bench frame-floor` instead: a bare NIO server with the dispatcher's framing \
            that answers each frame at once, no database: what any server here spends on a \
            framed request and its answer.
            """)

    @Option(help: "Requests in the first window (N); the second has 2N.") var count = 20_000
    @Option(help: "Connections, one request in flight each.") var connections = 64
    @Option(help: "Requests sent before the windows.") var warmUp = 2_000
    @Option(help: "Pairs of windows; the medians are reported.") var repeats = 3
    @Flag(help: "Also count system calls and context switches with perf stat.") var perf = false
    @Flag(help: "Run the dispatcher under callgrind and count its instructions (slow: use a smaller --count).") var callgrind = false
    @Flag(help: "Measure the bare framed server (fleet-bench frame-floor) instead of the dispatcher.") var floor = false
    @Option(help: "The dispatcher executable (default: the one beside fleet-bench).") var dispatcher = BenchDispatcher.besideThisOne
    @Flag(help: "Print one JSON object per line instead of a table.") var json = false

    private static let token = "fleet-bench-enqueue-token"

    func validate() throws {
        guard count > 0, connections > 0, warmUp >= 0, repeats > 0 else {
            throw ValidationError("--count, --connections and --repeats must be positive")
        }
    }

    func run() async throws {
        let database = floor ? nil : try await BenchDatabase.prepare()
        let profiles = NSTemporaryDirectory() + "fleet-bench-callgrind-\(UUID().uuidString).out"
        let wrapper = callgrind ? [packageRoot.appendingPathComponent("scripts/callgrind.sh").path, profiles] : []
        let readyWithin: Duration = callgrind ? .seconds(600) : .seconds(60)
        let process: ChildProcess
        let load: EnqueueConnections
        if let database {
            let server = try await BenchDispatcher.start(
                databaseURL: database.url, token: Self.token, groupCommit: true, executable: dispatcher, wrapper: wrapper, readyWithin: readyWithin)
            process = server.process
            load = try await EnqueueLoad(port: server.port, token: Self.token, connections: connections).connect()
        } else {
            (process, load) = try await Self.startFloor(wrapper: wrapper, readyWithin: readyWithin, connections: connections)
        }
        defer { process.signal(SIGTERM) }
        defer { load.close() }
        let counting = callgrind ? Callgrind(pid: process.pid, profiles: profiles) : nil
        try await load.send(count: warmUp)
        var report = Report()
        for round in 1...repeats {
            var windows: [[String: Double]] = []
            for size in [count, 2 * count] {
                try await database?.pool.query("TRUNCATE jobs")
                let counters = try await measure(size, load, process.pid, counting)
                windows.append(counters)
                progress("round \(round)/\(repeats), \(size) enqueues: "
                    + counters.sorted { $0.key < $1.key }.map { "\($0.key) \(String(format: "%.0f", $0.value))" }.joined(separator: ", "))
            }
            for (name, value) in windows[1] {
                report.add("enqueue_cost.\(name)", (value - (windows[0][name] ?? 0)) / Double(count), unit: Self.unit(name))
            }
        }
        try await database?.pool.query("TRUNCATE jobs")
        if json {
            printJSONLines(report.medians)
            return
        }
        let server = floor ? "the bare framed server (fleet-bench frame-floor)" : dispatcher
        print("enqueue-cost: \(connections) connections, windows of \(count) and \(2 * count) single enqueues, medians of \(repeats); \(server)")
        for measurement in report.medians {
            print(measurement.metric.padding(toLength: 36, withPad: " ", startingAt: 0) + String(format: "%10.2f ", measurement.value) + measurement.unit)
        }
        print("per request: (2N window - N window) / N; cpu_us from /proc (loaded-machine noise included)")
        if let counting { print("callgrind profiles of the windows: \(counting.profiles).N (callgrind_annotate)") }
        if let database { print("server: \(try await database.settings())") }
    }

    /// `fleet-bench frame-floor` started from this executable, and the connections once it answers.
    private static func startFloor(wrapper: [String], readyWithin: Duration, connections: Int) async throws -> (ChildProcess, EnqueueConnections) {
        let port = try freeTCPPort()
        let command = wrapper + [CommandLine.arguments[0], "frame-floor", "--port", "\(port)"]
        let process = try ChildProcess(command[0], Array(command.dropFirst()), environment: ProcessInfo.processInfo.environment,
                                       outputPath: NSTemporaryDirectory() + "fleet-bench-frame-floor.log")
        let deadline = ContinuousClock.now + readyWithin
        while ContinuousClock.now < deadline {
            if let status = process.exitStatus { throw BenchError("frame-floor exited with \(status)") }
            if let load = try? await EnqueueLoad(port: port, token: token, connections: connections).connect() { return (process, load) }
            try await Task.sleep(for: .milliseconds(100))
        }
        process.signal(SIGTERM)
        throw BenchError("frame-floor did not listen on \(port) within \(readyWithin)")
    }

    /// The counters of one window of `size` enqueues.
    private func measure(_ size: Int, _ load: EnqueueConnections, _ pid: pid_t, _ callgrind: Callgrind?) async throws -> [String: Double] {
        let counting = perf ? try await PerfStat.attach(to: pid) : nil
        try await callgrind?.zero()
        guard let before = CPUTime.split(of: pid) else { throw BenchError("cannot read /proc/\(pid)/stat") }
        try await load.send(count: size)
        guard let after = CPUTime.split(of: pid) else { throw BenchError("cannot read /proc/\(pid)/stat") }
        let user = (after.user - before.user) * 1e6, system = (after.system - before.system) * 1e6
        var counters = ["cpu_us": user + system, "cpu_user_us": user, "cpu_system_us": system]
        if let counting { counters.merge(try await counting.stop()) { $1 } }
        if let callgrind { counters["instructions"] = try await callgrind.dump() }
        return counters
    }

    private static func unit(_ counter: String) -> String {
        counter.hasSuffix("_us") ? "µs/request" : "/request"
    }
}

/// A process running under callgrind (`scripts/callgrind.sh`), its counts zeroed and dumped by
/// `callgrind_control`, which returns once the process has done it.
private struct Callgrind {
    let pid: pid_t
    /// callgrind's output file; the n-th dump is `profiles.n`.
    let profiles: String

    func zero() async throws {
        try await control("--zero")
    }

    /// Dumps the counts since the last zero and returns their instructions (the dump's totals).
    func dump() async throws -> Double {
        let before = dumps()
        try await control("--dump")
        guard let newest = dumps().subtracting(before).max(by: { $0.count == $1.count ? $0 < $1 : $0.count < $1.count }) else {
            throw BenchError("callgrind wrote no dump beside \(profiles)")
        }
        let text = try String(contentsOfFile: newest, encoding: .utf8)
        guard let line = text.split(separator: "\n").last(where: { $0.hasPrefix("totals:") || $0.hasPrefix("summary:") }),
              let total = line.split(separator: " ").last.flatMap({ Double($0) }) else {
            throw BenchError("no totals in \(newest)")
        }
        return total
    }

    private func dumps() -> Set<String> {
        let folder = URL(fileURLWithPath: profiles).deletingLastPathComponent().path
        let name = URL(fileURLWithPath: profiles).lastPathComponent + "."
        let files = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        return Set(files.filter { $0.hasPrefix(name) }.map { folder + "/" + $0 })
    }

    private func control(_ command: String) async throws {
        let status = try await ChildProcess.run("/usr/bin/callgrind_control", [command, "\(pid)"], outputPath: "/dev/null")
        guard status == 0 else { throw BenchError("callgrind_control \(command) \(pid) exited with \(status)") }
    }
}

/// `perf stat` attached to a process until stopped: its system calls and context switches.
/// perf counts the process for as long as the command it runs lasts (a wait for a stop file):
/// a signal would not do, since a child started from here inherits this process's blocked signals.
private struct PerfStat {
    static let events = ["raw_syscalls:sys_enter": "syscalls", "context-switches": "context_switches"]
    let process: ChildProcess
    let output: String
    let stopFile: String

    static func attach(to pid: pid_t) async throws -> PerfStat {
        let base = NSTemporaryDirectory() + "fleet-bench-perf-\(pid)-\(UUID().uuidString)"
        let (output, stopFile) = (base + ".csv", base + ".stop")
        let process = try ChildProcess(
            "/usr/bin/perf",
            ["stat", "-x", ",", "-o", output, "-e", events.keys.sorted().joined(separator: ","), "-p", "\(pid)", "--",
             "/bin/sh", "-c", "while [ ! -e '\(stopFile)' ]; do sleep 0.05; done"],
            environment: ProcessInfo.processInfo.environment)
        // perf tells nowhere when it has attached: the wait keeps the window's first requests in
        // its count. What it misses or adds is the same in both windows, and cancels in 2N - N.
        try await Task.sleep(for: .milliseconds(300))
        return PerfStat(process: process, output: output, stopFile: stopFile)
    }

    func stop() async throws -> [String: Double] {
        FileManager.default.createFile(atPath: stopFile, contents: nil)
        _ = await process.wait(timeout: .seconds(30))
        defer { [output, stopFile].forEach { try? FileManager.default.removeItem(atPath: $0) } }
        var counters: [String: Double] = [:]
        // CSV lines: value,unit,event,…
        for line in try String(contentsOfFile: output, encoding: .utf8).split(separator: "\n") where !line.hasPrefix("#") {
            let fields = line.split(separator: ",", omittingEmptySubsequences: false)
            guard fields.count > 2, let value = Double(fields[0]), let name = Self.events[String(fields[2])] else { continue }
            counters[name] = value
        }
        guard counters.count == Self.events.count else { throw BenchError("perf stat gave no counts (see \(output))") }
        return counters
    }
}
