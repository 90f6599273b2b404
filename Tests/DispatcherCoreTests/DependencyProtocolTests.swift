import DispatcherCore
@testable import DispatcherProtocol
@testable import FleetQueue
import FleetSupport
@testable import FleetTestSupport
import Foundation
import Testing

/// `options.after` and `jobs.enqueueGraph` over the dispatcher's socket: what a client sees, and
/// what it cannot do.
@Suite(.timeLimit(.minutes(3))) struct DependencyProtocolTests {
    func refusal<T>(_ body: () async throws -> T) async -> DispatcherError? {
        do {
            _ = try await body()
            return nil
        } catch let error as DispatcherError {
            return error
        } catch {
            return DispatcherError(.internal, "\(error)")
        }
    }

    func jobCount(_ q: TestQueue) async throws -> Int { try await q.pool.query("SELECT count(*) AS n FROM jobs").rows[0].int("n") }

    @Test func aJobEnqueuedAfterOthersWaitsVisiblyInStatusListAndStats() async throws {
        try await TestDispatcher.run { dispatcher in
            let client = try await dispatcher.client()
            let first = try await client.enqueue(kind: "drill.script", options: JobOptions(delaySeconds: 3600))
            let second = try await client.enqueue(kind: "drill.noop")
            let dependent = try await client.enqueue(kind: "drill.noop", options: JobOptions(after: [second.jobId, first.jobId, first.jobId]))
            let status = try await client.status(jobId: dependent.jobId)
            #expect(status.state == .waiting && status.after == [first.jobId, second.jobId] && status.waitingOn == [first.jobId, second.jobId])
            let listed = try await client.listJobs(JobFilterArguments(states: [.waiting]))
            #expect(listed.jobs.map(\.id) == [dependent.jobId])
            let stats = try await client.stats()
            #expect(stats.kinds.first { $0.kind == "drill.noop" }?.waiting == 1)
            // Cancelled while waiting, it ends, and so does anything after it.
            let grandchild = try await client.enqueue(kind: "drill.noop", options: JobOptions(after: [dependent.jobId]))
            #expect(try await client.cancel(jobId: dependent.jobId).outcome == .cancelled)
            let ended = try await client.status(jobId: grandchild.jobId)
            #expect(ended.state == .cancelled && ended.errors.last?.code == "DEPENDENCY_FAILED")
            #expect(try await client.stats().kinds.first { $0.kind == "drill.noop" }?.dependencyFailed == 1)
            // A job after one that already failed could never run: refused.
            let refused = await refusal { try await client.enqueue(kind: "drill.noop", options: JobOptions(after: [dependent.jobId])) }
            #expect(refused?.code == .badArgument && refused?.message.contains("already ended cancelled") == true)
            await client.close()
        }
    }

    @Test func hostileDependenciesAreRefusedAndInsertNothing() async throws {
        try await TestDispatcher.run { dispatcher in
            let client = try await dispatcher.client()
            let existing = try await client.enqueue(kind: "drill.noop")
            let before = try await jobCount(dispatcher.queue)
            let tooMany = await refusal { try await client.enqueue(kind: "drill.noop", options: JobOptions(after: Array(1...101))) }
            #expect(tooMany?.code == .badArgument && tooMany?.message.contains("args.options.after names 101 jobs; at most 100") == true)
            let unknown = await refusal {
                try await client.enqueue(kind: "drill.noop", options: JobOptions(after: [existing.jobId, 987_654, 987_655]))
            }
            #expect(unknown?.code == .badArgument && unknown?.message.contains("jobs 987654, 987655, which do not exist") == true)
            let negative = await refusal { try await client.enqueue(kind: "drill.noop", options: JobOptions(after: [-4])) }
            #expect(negative?.code == .badArgument && negative?.message.contains("args.options.after names -4") == true)
            let cycle = await refusal {
                try await client.enqueueGraph([
                    .init(name: "a", kind: "drill.noop", after: [.job(name: "c")]), .init(name: "b", kind: "drill.noop", after: [.job(name: "a")]),
                    .init(name: "c", kind: "drill.noop", after: [.job(name: "b")]),
                ])
            }
            #expect(cycle?.code == .badArgument && cycle?.message.contains("in a cycle") == true)
            let unnamed = await refusal { try await client.enqueueGraph([.init(name: "a", kind: "drill.noop", after: [.job(name: "z")])]) }
            #expect(unnamed?.code == .badArgument && unnamed?.message.contains("'z', which the graph does not name") == true)
            // A graph whose last job names a missing job: its first jobs are not inserted either.
            let partly = await refusal {
                try await client.enqueueGraph([
                    .init(name: "a", kind: "drill.noop"), .init(name: "b", kind: "drill.noop", after: [.job(name: "a"), .id(987_654)]),
                ])
            }
            #expect(partly?.code == .badArgument && partly?.message.contains("987654") == true)
            let unknownKind = await refusal { try await client.enqueueGraph([.init(name: "a", kind: "image.resize")]) }
            #expect(unknownKind?.code == .unknownKind)
            let keyed = await refusal {
                try await client.enqueueGraph([.init(name: "a", kind: "drill.noop", options: JobOptions(idempotencyKey: "k"))])
            }
            #expect(keyed?.code == .badArgument && keyed?.message.contains("args.jobs[0].options.idempotencyKey") == true)
            // The queue's own checks of a node are answered at the node's path.
            let badPriority = await refusal {
                try await client.enqueueGraph([.init(name: "a", kind: "drill.noop"), .init(name: "b", kind: "drill.noop", options: JobOptions(priority: 12))])
            }
            #expect(badPriority?.message == "args.jobs[1].options.priority 12 is outside 0...9")
            let badAfter = await refusal { try await client.enqueueGraph([.init(name: "a", kind: "drill.noop", after: [.id(-4)])]) }
            #expect(badAfter?.message == "args.jobs[0].after names -4, which is no job id")
            #expect(try await jobCount(dispatcher.queue) == before)
            await client.close()
        }
    }

    @Test func aGraphIsInsertedAtomicallyAndAnsweredAgainUnderItsKey() async throws {
        try await TestDispatcher.run { dispatcher in
            let client = try await dispatcher.client()
            let upstream = try await client.enqueue(kind: "drill.noop")
            let jobs: [EnqueueGraphRequest.Job] = [
                .init(name: "render", kind: "drill.noop", after: [.job(name: "cutout"), .job(name: "body")]),
                .init(name: "cutout", kind: "drill.script", after: [.job(name: "garment")]),
                .init(name: "garment", kind: "drill.script", payload: ["sleepMs": .number(1)], after: [.id(upstream.jobId)]),
                .init(name: "body", kind: "drill.script"),
            ]
            let graph = try await client.enqueueGraph(jobs, idempotencyKey: "tryon-1")
            #expect(graph.isNew && graph.jobs.map(\.name) == ["render", "cutout", "garment", "body"])
            let ids = Dictionary(uniqueKeysWithValues: graph.jobs.map { ($0.name, $0.jobId) })
            let render = try await client.status(jobId: ids["render"]!)
            #expect(render.state == .waiting && render.after == [ids["cutout"]!, ids["body"]!].sorted())
            #expect(try await client.status(jobId: ids["garment"]!).after == [upstream.jobId])
            #expect(try await client.status(jobId: ids["body"]!).state == .available)
            #expect(render.idempotencyKey == "tryon-1/render")
            let again = try await client.enqueueGraph(jobs, idempotencyKey: "tryon-1")
            #expect(!again.isNew && again.jobs == graph.jobs)
            // The key names that graph: another graph under it is refused.
            let other = await refusal { try await client.enqueueGraph([.init(name: "render", kind: "drill.noop"), .init(name: "extra", kind: "drill.noop")], idempotencyKey: "tryon-1") }
            #expect(other?.code == .badArgument && other?.message.contains("already names a graph of other jobs") == true)
            await client.close()
        }
    }

    /// `dispatcher enqueue --after` and `dispatcher enqueue-graph` as an operator types them; `status` shows the wait.
    @Test func theCommandLineEnqueuesAfterOtherJobsAndShowsWhatAJobWaitsOn() async throws {
        try await TestDispatcher.run { dispatcher in
            let socket = dispatcher.settings.socketPath!
            func dispatcherCommand(_ arguments: [String]) async throws -> String {
                let output = temporaryPath("cli") + ".out"
                let status = try await ChildProcess.run(builtExecutable("dispatcher"), arguments + ["--dispatcher", socket], outputPath: output)
                let text = try String(contentsOfFile: output, encoding: .utf8)
                guard status == 0 else { throw TestFailure("dispatcher \(arguments.joined(separator: " ")) exited \(status): \(text)") }
                return text.trimmingCharacters(in: .whitespacesAndNewlines)
            }
            let first = try await dispatcherCommand(["enqueue", "drill.noop", "--delay", "600"])
            let second = try await dispatcherCommand(["enqueue", "drill.noop", "--delay", "600"])
            let dependent = try await dispatcherCommand(["enqueue", "drill.noop", "--after", "\(second),\(first)"])
            let status = try JSONValue(json: try await dispatcherCommand(["status", dependent]))
            #expect(status["state"] == .string("waiting"))
            #expect(status["waitingOn"] == .array([first, second].map { .number(Double($0)!) }))
            let file = temporaryPath("graph") + ".json"
            try Data(#"{"jobs":[{"name":"b","kind":"drill.noop","after":["a",\#(first)]},{"name":"a","kind":"drill.noop"}],"idempotencyKey":"g"}"#.utf8)
                .write(to: URL(fileURLWithPath: file))
            let graph = try JSONValue(json: try await dispatcherCommand(["enqueue-graph", file]))
            guard case .array(let jobs)? = graph["jobs"], case .number(let b)? = jobs.first?["jobId"], case .number(let a)? = jobs.last?["jobId"] else {
                throw TestFailure("no jobs in \(graph.jsonText)")
            }
            let waiting = try JSONValue(json: try await dispatcherCommand(["status", "\(Int64(b))"]))
            #expect(waiting["waitingOn"] == .array([Double(first)!, a].sorted().map { .number($0) }))
            let refused = try await ChildProcess.run(builtExecutable("dispatcher"), ["enqueue", "drill.noop", "--after", "1,x", "--dispatcher", socket])
            #expect(refused != 0)
        }
    }

    @Test func aResultOver64KiBEndsTheJobDeadWithAClearError() async throws {
        try await TestDispatcher.run { dispatcher in
            let client = try await dispatcher.client()
            let worker = try WorkerProcess(databaseURL: dispatcher.queue.url)
            defer { worker.signal(SIGKILL) }
            let large = try await client.enqueue(kind: "drill.script", payload: ["resultBytes": .number(70_000)])
            let fits = try await client.enqueue(kind: "drill.script", payload: ["resultBytes": .number(60_000)])
            let dependent = try await client.enqueue(kind: "drill.script", payload: ["readDependencies": .bool(true)],
                                                     options: JobOptions(after: [fits.jobId]))
            let ended = try await client.wait(jobId: large.jobId, timeoutMs: 30_000).job
            #expect(ended.state == .dead && ended.result == nil && ended.errors.last?.code == "RESULT_TOO_LARGE")
            #expect(ended.errors.last?.error.contains("at most 65536 (64 KiB)") == true)
            let kept = try await client.wait(jobId: fits.jobId, timeoutMs: 30_000).job
            guard case .object(let result)? = kept.result, case .string(let padding)? = result["padding"] else {
                throw TestFailure("no result: \(String(describing: kept.result))")
            }
            #expect(padding.utf8.count > 59_000)
            // Its dependent read it.
            let read = try await client.wait(jobId: dependent.jobId, timeoutMs: 30_000).job
            #expect(read.state == .completed && read.result == .object(["attempt": .number(1), "after": .array([.number(Double(fits.jobId))])]))
            await client.close()
        }
    }
}
