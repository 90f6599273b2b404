// Synthetic job kinds, run by `fleet-drill` for queue tests, benchmarks and load drills.
import FleetQueue
import FleetRuntime
import FleetSchema
import FleetSupport
import Foundation

/// `drill.noop`: does nothing. With `sentAtNs` (wall clock, ns) in the payload, the result
/// carries `startLatencyNs`, the time from enqueue to the handler starting.
public struct NoopHandler: JobHandler {
    public let kind = JobKind.drillNoop
    let executions: ExecutionLog?

    public init(executions: ExecutionLog? = nil) { self.executions = executions }

    public func run(_ job: ClaimedJob, context: JobContext) async throws -> JSONValue? {
        let started = wallClockNanoseconds()
        executions?.append(job)
        guard job.payload.contains("sentAtNs"), let sentAtNs = try job.decodePayload(DrillNoop.self).sentAtNs else { return nil }
        return .object(["startLatencyNs": .number(Double(started - sentAtNs))])
    }
}

/// `drill.script`: behaves as its payload says, to exercise the queue's failure paths.
public struct ScriptHandler: JobHandler {
    public let kind = JobKind.drillScript
    /// Drills of the fleet-wide limits give these jobs limit keys.
    public let usesLimits = true
    let executions: ExecutionLog?

    public init(executions: ExecutionLog? = nil) { self.executions = executions }

    public func run(_ job: ClaimedJob, context: JobContext) async throws -> JSONValue? {
        executions?.append(job)
        let script = try job.decodePayload(DrillScript.self)
        if let sleep = script.sleepMs {
            if script.ignoreCancel == true {
                usleep(useconds_t(sleep * 1000))
            } else {
                try await Task.sleep(for: .milliseconds(sleep))
            }
        }
        if let until = script.sleepUntilNs {
            let left = until - wallClockNanoseconds()
            if left > 0 { try await Task.sleep(for: .nanoseconds(left)) }
        }
        if script.permanent == true, job.attempt <= script.failAttempts ?? .max {
            throw JobError.permanent(code: .drillPermanent, message: "scripted permanent failure")
        }
        if let fail = script.failAttempts, job.attempt <= fail {
            throw JobError.retryable("scripted failure on attempt \(job.attempt)")
        }
        if let bytes = script.resultBytes { return .object(["padding": .string(String(repeating: "x", count: max(0, bytes - 14)))]) }
        guard script.readDependencies == true else { return .object(["attempt": .number(Double(job.attempt))]) }
        let dependencies = try await context.dependencies(of: job)
        if let pending = dependencies.first(where: { $0.state != .completed }) {
            throw JobError.permanent(code: .drillDependencyPending, message: "ran while job \(pending.id) it runs after was \(pending.state.rawValue)")
        }
        return .object(["attempt": .number(Double(job.attempt)),
                        "after": .array(dependencies.filter { $0.result != nil }.map { .number(Double($0.id)) })])
    }
}

/// Appends `jobId attempt` per execution to a file, so tests can count executions.
public final class ExecutionLog: Sendable {
    private let descriptor: Int32

    public init?(path: String?) {
        guard let path else { return nil }
        descriptor = open(path, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        guard descriptor >= 0 else { return nil }
    }

    func append(_ job: ClaimedJob) {
        let line = Array("\(job.id) \(job.attempt)\n".utf8)
        _ = line.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
    }

    /// Reads a log: how many times each job id ran.
    public static func counts(_ path: String) -> [Int64: Int] {
        let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        var counts: [Int64: Int] = [:]
        for line in text.split(separator: "\n") {
            if let id = line.split(separator: " ").first.flatMap({ Int64($0) }) { counts[id, default: 0] += 1 }
        }
        return counts
    }
}

public func wallClockNanoseconds() -> Int64 {
    var time = timespec()
    clock_gettime(CLOCK_REALTIME, &time)
    return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
}

/// The drill worker process: the fleet's runtime with the synthetic kinds only.
public enum DrillWorker {
    public static let defaultConcurrency: [JobKind: Int] = [.drillNoop: 256, .drillScript: 64]

    public static func run(executable: String, executionLog: String?) async throws {
        let settings = try FleetProcess.bootstrap(defaultConcurrency: defaultConcurrency)
        let log = ExecutionLog(path: executionLog)
        try await FleetProcess.runWorker(
            executable: executable, settings: settings, schema: FleetSchema.migrations,
            handlers: { _ in [NoopHandler(executions: log), ScriptHandler(executions: log)] })
    }
}

extension JobErrorCode {
    /// A drill job scripted to fail for good.
    static let drillPermanent = Self(rawValue: "DRILL_PERMANENT")
    /// A drill job that reads its dependencies ran before one of them completed.
    static let drillDependencyPending = Self(rawValue: "DRILL_DEPENDENCY_PENDING")
}
