@testable import DispatcherCore
@testable import DispatcherProtocol
import FleetPostgres
import FleetSupport
@testable import FleetQueue
@testable import FleetTestSupport
import Foundation
import Synchronization
import Testing

/// Group commit of single enqueues over real sockets and PostgreSQL (`EnqueueBatcher`): requests
/// that arrive while commits run share the next one, each answered with its own id, `isNew`
/// and error. To make a batch on purpose, a transaction holds a SHARE lock on `jobs`: the first
/// requests take every commit slot and wait for it, the next ones wait for a slot, and the
/// lock is released once all of them wait.
@Suite struct GroupCommitTests {
    /// One request of a batch, from its own connection.
    struct Enqueue: Sendable {
        var kind = "drill.noop"
        var payload: [String: JSONValue] = [:]
        var options = JobOptions()
    }

    typealias Outcome = Result<EnqueuedJobResult, DispatcherError>

    @Test func jobsArrivingDuringACommitShareTheNextAndARefusedOneFailsAlone() async throws {
        try await TestDispatcher.run { dispatcher in
            // The bad priority breaks the queue's rules (`NewJob.validate`), which the op runs before
            // the job joins a batch: it is answered at once and never waits; the unknown kind is
            // refused inside the batch.
            let outcomes = try await heldBatch(dispatcher, [
                Enqueue(payload: ["n": .number(1)]), Enqueue(payload: ["n": .number(2)]), Enqueue(options: JobOptions(priority: 12)),
                Enqueue(payload: ["n": .number(3)]), Enqueue(kind: "no.such.kind"), Enqueue(payload: ["n": .number(4)]),
            ], alsoWaiting: -1)
            #expect(code(outcomes[2]) == "BAD_ARGUMENT")
            #expect(code(outcomes[4]) == "UNKNOWN_KIND")
            let ids = [0, 1, 3, 5].compactMap { try? outcomes[$0].get() }.map(\.jobId)
            #expect(ids.count == 4)
            #expect(try await transactions(dispatcher, ids) == 1, "the batch's jobs were not committed together")
            #expect(try await jobCount(dispatcher) == 2 + 4)
        }
    }

    /// A job the database itself refuses (a NUL in its payload, which jsonb cannot store) fails
    /// the batch's statement; its neighbours are then inserted one by one.
    @Test func aJobTheDatabaseRefusesFailsAloneInItsBatch() async throws {
        try await TestDispatcher.run { dispatcher in
            let outcomes = try await heldBatch(dispatcher, [
                Enqueue(payload: ["n": .number(1)]), Enqueue(payload: ["text": .string("a\u{0}b")]), Enqueue(payload: ["n": .number(2)]),
                Enqueue(options: JobOptions(idempotencyKey: "k1")),
            ])
            #expect(code(outcomes[1]) == "BAD_ARGUMENT")
            for index in [0, 2, 3] { #expect(code(outcomes[index]) == nil) }
            #expect(try await jobCount(dispatcher) == 2 + 3)
            let keyed = try await dispatcher.queue.pool.query("SELECT id FROM jobs WHERE idempotency_key = 'k1'").rows
            #expect(try keyed.map { try $0.int64("id") } == [try outcomes[3].get().jobId])
        }
    }

    @Test func theSameKeyTwiceInOneBatchIsOneJobNewOnce() async throws {
        try await TestDispatcher.run { dispatcher in
            let keyed = Enqueue(options: JobOptions(idempotencyKey: "same"))
            let outcomes = try await heldBatch(dispatcher, [keyed, Enqueue(), keyed])
            let first = try outcomes[0].get(), second = try outcomes[2].get()
            #expect(first.jobId == second.jobId)
            #expect([first.isNew, second.isNew].sorted { !$0 && $1 } == [false, true])
            #expect(try await transactions(dispatcher, [first.jobId, try outcomes[1].get().jobId]) == 1)
            #expect(try await jobCount(dispatcher) == 2 + 2)
        }
    }

    /// PostgreSQL stops while a batch waits for its commit: every client of the batch (and of
    /// the commits it waited behind) is answered UNAVAILABLE, and none of their jobs exists.
    @Test func theDatabaseGoneMidBatchFailsEveryClientAndCommitsNothing() async throws {
        try await PostgresCluster.withPrivate { cluster in
            try await TestDispatcher.run(cluster: cluster) { dispatcher in
                let outcomes = try await heldBatch(dispatcher, Array(repeating: Enqueue(), count: 5), includeFillers: true, release: { _ in
                    try await cluster.stop()
                })
                #expect(outcomes.count == EnqueueBatcher.defaultMaxInFlight + 5)
                #expect(outcomes.map(code).allSatisfy { $0 == "UNAVAILABLE" }, "\(outcomes.map(code))")
                try await cluster.start()
                let count = try await dispatcher.queue.pool.withRetry { try await $0.query("SELECT count(*) AS n FROM jobs").rows[0].int("n") }
                #expect(count == 0)
            }
        }
    }

    /// A client that goes away while its batch commits: its job is committed all the same, and
    /// its neighbours are answered.
    @Test func aClientGoneWhileItsBatchCommitsStillHasItsJobAndTheOthersTheirAnswers() async throws {
        try await TestDispatcher.run { dispatcher in
            let gone = try await dispatcher.client()
            let request = Mutex<Task<EnqueuedJobResult, any Error>?>(nil)
            let outcomes = try await heldBatch(dispatcher, [Enqueue(), Enqueue()], alsoWaiting: 1, sendAlso: {
                // Unkeyed, so the client cannot send it again on a new connection.
                request.withLock { $0 = Task { try await gone.enqueue(kind: "drill.noop", payload: ["gone": .bool(true)]) } }
            }, release: { holder in
                await gone.close()
                let unanswered = try #require(request.withLock { $0 })
                await #expect(throws: (any Error).self) { try await unanswered.value }
                try await holder.query("COMMIT")
            })
            #expect(outcomes.map(code) == [nil, nil])
            try await dispatcher.queue.waitUntil(timeout: .seconds(10), "the gone client's job is committed") {
                try await dispatcher.queue.pool.query("SELECT count(*) AS n FROM jobs WHERE payload ? 'gone'").rows[0].int("n") == 1
            }
        }
    }

    // MARK: - Helpers

    /// Requests answered from their batch's commit (`EnqueueOperation.start`) count as in flight
    /// like any other: with at most 3 at once, 40 sent together are each answered once, the later
    /// ones let in as the earlier ones are answered, their payloads stored as sent.
    @Test(.timeLimit(.minutes(1)))
    func pipelinedEnqueuesBeyondTheInFlightLimitAreEachAnsweredOnce() async throws {
        try await TestDispatcher.run({ $0.maxInFlight = 3 }) { dispatcher in
            let count = 40
            let frames = (1...count).map { #"{"id":\#($0),"op":"enqueue","args":{"kind":"drill.noop","payload":{"n":\#($0),"x":0.5}}}"# + "\n" }
            let answers = try await dispatcher.withRawConnection(.unix) { raw in
                try await raw.greeting()
                try await raw.send(frames.joined())
                var answers: [Int: Int64] = [:]
                for _ in 0..<count {
                    let frame = try await raw.response()
                    guard case .number(let id)? = frame["id"], case .number(let job)? = frame["result"]?["jobId"] else {
                        throw TestFailure("not an answer: \(frame.jsonText)")
                    }
                    #expect(answers.updateValue(Int64(job), forKey: Int(id)) == nil, "request \(id) answered twice")
                }
                return answers
            }
            #expect(answers.keys.sorted() == Array(1...count))
            #expect(try await jobCount(dispatcher) == count)
            let client = try await dispatcher.client(.unix)
            #expect(try await client.status(jobId: try #require(answers[7])).payload == .object(["n": .number(7), "x": .number(0.5)]))
            await client.close()
        }
    }

    private func code(_ outcome: Outcome) -> String? {
        if case .failure(let error) = outcome { error.code.rawValue } else { nil }
    }

    private func jobCount(_ dispatcher: TestDispatcher) async throws -> Int {
        try await dispatcher.queue.pool.query("SELECT count(*) AS n FROM jobs").rows[0].int("n")
    }

    /// How many transactions wrote these jobs.
    private func transactions(_ dispatcher: TestDispatcher, _ ids: [Int64]) async throws -> Int {
        try await dispatcher.queue.pool.query(
            "SELECT count(DISTINCT xmin::text) AS n FROM jobs WHERE id = ANY($1::bigint[])", [PostgresArray(ids)]
        ).rows[0].int("n")
    }

    /// Holds the commit slots with filler enqueues blocked on a SHARE lock on `jobs`, sends
    /// `batch` (each from its own connection), waits until they (and the `alsoWaiting` requests
    /// `sendAlso` sent) wait for a slot, then runs `release` with the lock's connection (by default:
    /// ends its transaction). Returns the batch's outcomes in order, after the fillers' when `includeFillers`.
    private func heldBatch(
        _ dispatcher: TestDispatcher, _ batch: [Enqueue], alsoWaiting: Int = 0, includeFillers: Bool = false,
        sendAlso: () async throws -> Void = {}, release: (_ holder: PostgresConnection) async throws -> Void = { try await $0.query("COMMIT") }
    ) async throws -> [Outcome] {
        let batcher = try #require(dispatcher.batcher)
        let holder = try await PostgresConnection.connect(dispatcher.queue.url)
        try await holder.query("BEGIN")
        try await holder.query("LOCK TABLE jobs IN SHARE MODE")
        let fillers = (0..<EnqueueBatcher.defaultMaxInFlight).map { _ in Enqueue() }
        return try await withThrowingTaskGroup(of: (Int, Outcome).self) { group in
            for (index, request) in fillers.enumerated() { group.addTask { (index, try await send(request, to: dispatcher)) } }
            do {
                try await dispatcher.queue.waitUntil(timeout: .seconds(20), "every commit slot waits for the lock") {
                    try await dispatcher.queue.pool.query("""
                        SELECT count(*) AS n FROM pg_stat_activity
                        WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO jobs%'
                        """).rows[0].int("n") == fillers.count
                }
                try await sendAlso()
                for (index, request) in batch.enumerated() {
                    group.addTask { (fillers.count + index, try await send(request, to: dispatcher)) }
                }
                try await dispatcher.queue.waitUntil(timeout: .seconds(20), "the batch waits for a slot") {
                    batcher.waiting == batch.count + alsoWaiting
                }
            } catch {
                // The group waits for its requests: they must not wait for the lock for ever.
                Issue.record("\(batcher.waiting) requests wait for a slot")
                _ = try? await holder.query("COMMIT")
                throw error
            }
            try await release(holder)
            var outcomes = [Outcome?](repeating: nil, count: fillers.count + batch.count)
            for try await (index, outcome) in group { outcomes[index] = outcome }
            let fillerOutcomes = outcomes.prefix(fillers.count).compactMap { $0 }
            if !includeFillers { #expect(fillerOutcomes.allSatisfy { (try? $0.get()) != nil }) }
            return Array((includeFillers ? outcomes : Array(outcomes.dropFirst(fillers.count))).compactMap { $0 })
        }
    }

    private func send(_ request: Enqueue, to dispatcher: TestDispatcher) async throws -> Outcome {
        let client = try await dispatcher.client()
        defer { Task { await client.close() } }
        do {
            return .success(try await client.enqueue(kind: request.kind, payload: request.payload, options: request.options))
        } catch let error as DispatcherError {
            return .failure(error)
        }
    }
}
