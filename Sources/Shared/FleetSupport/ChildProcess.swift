import CSpawnShims
import Foundation
import Synchronization

/// A child process started with posix_spawn and reaped with waitpid, for the tools that
/// start fleet processes (the benchmark, the tests). Output goes to a file or /dev/null.
public final class ChildProcess: Sendable {
    public let pid: pid_t
    private let exit = Mutex<(status: Int32, peakRSSKilobytes: Int)?>(nil)

    /// Starts `path` with `arguments`; stdout and stderr go to `outputPath` (appended) or nowhere.
    /// The child inherits no other descriptor: NIO accepts sockets without close-on-exec, and a
    /// child holding a copy of one keeps the connection open after the server closed it (the
    /// client never sees the close) for as long as the child lives.
    public init(_ path: String, _ arguments: [String], environment: [String: String], outputPath: String? = nil) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        let target = outputPath ?? "/dev/null"
        posix_spawn_file_actions_addopen(&actions, 1, target, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        fleet_spawn_file_actions_addclosefrom(&actions, 3)
        let argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var child: pid_t = 0
        let result = posix_spawn(&child, path, &actions, nil, argv, envp)
        guard result == 0 else { throw ChildProcessError(message: "cannot start \(path): \(String(cString: strerror(result)))") }
        pid = child
    }

    public func signal(_ signal: Int32) {
        if exitStatus == nil { kill(pid, signal) }
    }

    /// Whether every thread of the process is stopped (by SIGSTOP): the signal is sent at once,
    /// but a thread running on another core stops only when it next enters the kernel.
    public var isStopped: Bool {
        guard let threads = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task"), !threads.isEmpty else { return false }
        return threads.allSatisfy { thread in
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/task/\(thread)/stat", encoding: .utf8),
                  let nameEnd = stat.lastIndex(of: ")"), stat.distance(from: nameEnd, to: stat.endIndex) > 2 else { return false }
            return stat[stat.index(nameEnd, offsetBy: 2)] == "T"
        }
    }

    /// The exit code (128 + signal when killed by one), or nil while it runs.
    public var exitStatus: Int32? { reap()?.status }

    /// The most memory the process held, once it has exited. posix_spawn runs the child in
    /// the parent's address space until exec, so this is at least the parent's size then:
    /// meaningful when a small process (the benchmark) starts a large one.
    public var peakRSSKilobytes: Int? { reap()?.peakRSSKilobytes }

    private func reap() -> (status: Int32, peakRSSKilobytes: Int)? {
        exit.withLock { ended in
            if let ended { return ended }
            var raw: Int32 = 0
            var usage = rusage()
            guard wait4(pid, &raw, WNOHANG, &usage) == pid else { return nil }
            ended = ((raw & 0x7f) == 0 ? (raw >> 8) & 0xff : 128 + (raw & 0x7f), Int(usage.ru_maxrss))
            return ended
        }
    }

    /// Waits for the exit; nil if it still runs after `timeout`.
    public func wait(timeout: Duration = .seconds(3600)) async -> Int32? {
        let deadline = ContinuousClock.now + timeout
        while exitStatus == nil {
            guard ContinuousClock.now < deadline else { return nil }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return exitStatus
    }

    /// Runs a command to the end and returns its exit code.
    public static func run(_ path: String, _ arguments: [String], environment: [String: String] = ProcessInfo.processInfo.environment,
                           outputPath: String? = nil) async throws -> Int32 {
        let process = try ChildProcess(path, arguments, environment: environment, outputPath: outputPath)
        return await process.wait() ?? -1
    }

    deinit {
        if exitStatus == nil { kill(pid, SIGKILL); _ = waitpid(pid, nil, 0) }
    }
}

public struct ChildProcessError: Error, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}
