@testable import DispatcherCore
@testable import FleetAccess
import DispatcherProtocol
import FleetPostgres
@testable import FleetQueue
import FleetSupport
@testable import FleetTestSupport
import Foundation
import Synchronization
import Testing

/// Job control and scoped access over real sockets and a real PostgreSQL.
@Suite struct JobControlTests {
    /// Who may use each op: the protocol's contract (docs/protocol.md). A new op must be added here.
    static let allowedRoles: [String: Set<AccessRole>] = {
        let submitters: Set<AccessRole> = [.submit, .operate], everyone: Set<AccessRole> = [.submit, .read, .operate]
        let readers: Set<AccessRole> = [.read, .operate], operators: Set<AccessRole> = [.operate]
        return [
            "enqueue": submitters, "jobs.enqueueGraph": submitters, "image.normalize": submitters, "garment.process": submitters, "account.purge": submitters,
            "cancel": submitters, "render.request": submitters, "render.feedback": submitters, "token.issue": submitters,
            "account.link": submitters, "credits.get": submitters, "upload.presign": submitters, "image.url": submitters,
            "status": everyone, "wait": everyone, "render.status": everyone, "render.wait": everyone, "renders.list": everyone,
            "stats": readers, "job.get": readers, "jobs.list": readers, "audit.list": readers,
            "job.retry": operators, "jobs.retry": operators, "job.discard": operators, "jobs.discard": operators, "render.retry": operators,
            "queue.pause": operators, "queue.resume": operators,
            "limits.list": readers, "limit.set": operators, "limit.remove": operators,
        ]
    }()

    /// Every op × every role, over TCP: the role check comes before the arguments are read, so
    /// an allowed op answers anything but `FORBIDDEN` (often `BAD_ARGUMENT` for the empty args),
    /// a refused one `FORBIDDEN`, and the connection stays open either way.
    @Test func everyOpIsAllowedExactlyToItsRoles() async throws {
        try await TestDispatcher.run { dispatcher in
            let store = AccessTokenStore(pool: dispatcher.queue.pool)
            var tokens: [AccessRole: String] = [:]
            for role in AccessRole.allCases { tokens[role] = try await store.create(name: "t-\(role.rawValue)", role: role) }
            let greeting = try await dispatcher.withRawConnection(.tcp) { try await $0.greeting() }
            guard case .array(let advertised)? = greeting["ops"] else { throw TestFailure("no ops in the greeting") }
            let ops = Set(advertised.compactMap { if case .string(let op) = $0 { op } else { nil } }).subtracting(["ping", "auth"])
            #expect(ops == Set(Self.allowedRoles.keys), "ops without a row in the table, or rows for no op")
            for role in AccessRole.allCases { try await dispatcher.waitUntilAccepted(token: tokens[role]!) }
            for role in AccessRole.allCases {
                try await dispatcher.withRawConnection(.tcp) { raw in
                    try await raw.greeting()
                    try await raw.send(#"{"id":0,"op":"auth","args":{"token":"\#(tokens[role]!)"}}"# + "\n")
                    let auth = try await raw.response()
                    #expect(auth["result"]?["role"] == .string(role.rawValue) && auth["result"]?["name"] == .string("t-\(role.rawValue)"))
                    for (index, op) in ops.sorted().enumerated() {
                        try await raw.send(#"{"id":\#(index + 1),"op":"\#(op)","args":{}}"# + "\n")
                        let answer = try await raw.response()
                        let forbidden = answer.errorCode == "FORBIDDEN"
                        #expect(forbidden == !(Self.allowedRoles[op]!.contains(role)), "\(op) as \(role): \(answer.jsonText)")
                    }
                    #expect(try await raw.response(of: "ping")["result"]?["pong"] == .bool(true), "the connection stays open")
                }
            }
        }
    }

    @Test func theEnvironmentTokenOperatesAndARevokedTokenStopsAtOnce() async throws {
        try await TestDispatcher.run { dispatcher in
            let operatorClient = try await dispatcher.client(.tcp)
            #expect(try await operatorClient.send(AuditListRequest()).entries.isEmpty)
            let store = AccessTokenStore(pool: dispatcher.queue.pool)
            let token = try await store.create(name: "dashboard", role: .read)
            await #expect(throws: AccessTokenStore.StoreError.nameTaken("dashboard")) { try await store.create(name: "dashboard", role: .read) }
            try await dispatcher.waitUntilAccepted(token: token)
            let reader = try await dispatcher.client(.tcp, token: token)
            _ = try await reader.send(StatsRequest())
            await #expect(throws: DispatcherError.self) { _ = try await reader.send(QueuePauseRequest(kind: "drill.noop")) }
            try await store.revoke(name: "dashboard")
            // A new connection refused shows the directory has re-read the table; the open one
            // must be refused from then on too.
            try await dispatcher.waitUntilRefused(token: token)
            do {
                _ = try await reader.send(StatsRequest())
                Issue.record("a revoked token still works on its open connection")
            } catch let error as DispatcherError {
                #expect(error.code == .unauthenticated && error.message.contains("revoked"))
            } catch {}
            await #expect(throws: (any Error).self) { _ = try await dispatcher.client(.tcp, token: token) }
            #expect(try await store.list().map(\.name) == ["dashboard"])
            #expect(try await store.list()[0].revokedAt != nil)
        }
    }

    @Test func operatorsListRetryAndDiscardJobsAndEachActionIsAudited() async throws {
        try await TestDispatcher.run { dispatcher in
            let q = dispatcher.queue
            let dead = try await Self.makeDead(q, count: 5, code: "PROVIDER_DOWN")
            let otherDead = try await Self.makeDead(q, count: 2, code: "OTHER")
            let queued = try await q.queue.enqueue(NewJob(kind: .drillNoop))
            let client = try await dispatcher.client(.tcp)

            // Pages by cursor: every dead job once, newest first.
            var seen: [Int64] = []
            var cursor: String?
            repeat {
                let page = try await client.listJobs(JobFilterArguments(states: [.dead]), limit: 3, cursor: cursor)
                seen += page.jobs.map(\.id)
                cursor = page.nextCursor
            } while cursor != nil
            #expect(seen == (dead + otherDead).sorted(by: >))
            let byCode = try await client.send(JobsListRequest(filter: JobFilterArguments(errorCode: "OTHER")))
            #expect(byCode.jobs.map(\.id) == otherDead.sorted(by: >) && byCode.jobs[0].lastError?.code == "OTHER")
            #expect(try await client.job(id: dead[0]).errors.count == 1)

            // One job.
            let retried = try await client.retryJob(id: dead[0])
            #expect(retried.state == .available && retried.errors.count == 1 && retried.maxAttempts == retried.attempt + 1)
            await #expect(throws: DispatcherError(.jobNotRetryable, "job \(queued.id) is available; only dead and cancelled jobs are retried")) {
                _ = try await client.send(JobRetryRequest(jobId: queued.id))
            }
            await #expect(throws: DispatcherError(.jobNotFinished, "job \(queued.id) is available; only finished jobs are discarded (cancel it first)")) {
                _ = try await client.send(JobDiscardRequest(jobId: queued.id))
            }
            #expect(try await client.discardJob(id: otherDead[0]).discarded)
            await #expect(throws: DispatcherError(.notFound, "no job \(otherDead[0])")) { _ = try await client.send(JobGetRequest(jobId: otherDead[0])) }

            // In bulk, by code: a dry run counts, the run retries, nothing else moves.
            let filter = JobFilterArguments(errorCode: "PROVIDER_DOWN")
            #expect(try await client.send(JobsRetryRequest(filter: filter, limit: 100, dryRun: true)) == BulkJobsResult(count: 4, dryRun: true))
            #expect(try await q.states()[.dead] == 5)
            #expect(try await client.retryJobs(filter, limit: 3) == BulkJobsResult(count: 3, dryRun: false))
            #expect(try await client.send(JobsRetryRequest(filter: filter, limit: 100)) == BulkJobsResult(count: 1, dryRun: false))
            #expect(try await q.states()[.dead] == 1)
            #expect(try await client.discardJobs(JobFilterArguments(states: [.dead]), limit: 100).count == 1)
            #expect(try await q.states()[.dead] == nil)

            let audit = try await client.auditTrail().entries
            #expect(audit.map(\.action) == ["jobs.discard", "jobs.retry", "jobs.retry", "job.discard", "job.retry"])
            #expect(audit.allSatisfy { $0.actor == AccessTokens.defaultTokenName })
            #expect(audit.map(\.affected) == [1, 1, 3, 1, 1])
            #expect(audit[1].target["filter"]?["errorCode"] == .string("PROVIDER_DOWN"))
        }
    }

    /// A pause is a row the claim itself reads: the next claim of any worker honours it.
    @Test func aPausedKindOrQueueIsNotClaimedUntilResumed() async throws {
        try await TestDispatcher.run { dispatcher in
            let q = dispatcher.queue
            _ = try await q.queue.enqueue([NewJob(kind: .drillNoop), NewJob(kind: .drillScript, queue: "batch"), NewJob(kind: .drillScript)])
            let client = try await dispatcher.unixClient()
            let paused = try await client.pause(kind: "drill.noop")
            #expect(paused.changed && paused.pauses.map(\.name) == ["drill.noop"] && paused.pauses[0].pausedBy == "unix-socket")
            #expect(try await client.send(QueuePauseRequest(kind: "drill.noop")).changed == false)
            _ = try await client.send(QueuePauseRequest(queue: "batch"))
            await #expect(throws: DispatcherError.self) { _ = try await client.send(QueuePauseRequest(kind: "drill.nope")) }
            let claim = ClaimRequest(owner: "w", lease: .seconds(30), slots: [.drillNoop: 10, .drillScript: 10])
            let first = try await q.driver.jobClaim(claim).jobs
            #expect(first.map(\.kind) == [.drillScript] && first[0].queue == "default")
            #expect(try await client.listJobs(JobFilterArguments(states: [.running])).jobs.map(\.workerId) == ["w"])
            let stats = try await client.stats()
            #expect(stats.kinds.first { $0.kind == "drill.noop" }?.paused == true)
            #expect(Set(stats.pauses.map(\.name)) == ["drill.noop", "batch"])
            _ = try await client.resume(kind: "drill.noop")
            _ = try await client.send(QueueResumeRequest(queue: "batch"))
            #expect(try await q.driver.jobClaim(claim).jobs.count == 2)
            #expect(try await client.send(QueueResumeRequest(queue: "batch")).changed == false)
        }
    }

    /// Retrying 100,000 dead jobs runs in short batches: workers draining another kind meanwhile
    /// never wait on it.
    @Test func aBulkRetryDoesNotStallTheClaim() async throws {
        try await TestDispatcher.run { dispatcher in
            let q = dispatcher.queue
            try await q.pool.query("""
                INSERT INTO jobs (kind, state, attempt, max_attempts, finished_at, errors, last_error_code)
                SELECT 'drill.script', 'dead', 1, 1, now(), '[{"attempt":1,"at":"2026-01-01T00:00:00Z","error":"down","code":"PROVIDER_DOWN"}]',
                    'PROVIDER_DOWN'
                FROM generate_series(1, 100000)
                """)
            let client = try await dispatcher.unixClient()
            let clock = ContinuousClock()
            let retryStarted = clock.now
            let retryDone = Atomic(false)
            async let retried = {
                defer { retryDone.store(true, ordering: .releasing) }
                return try await client.send(JobsRetryRequest(filter: JobFilterArguments(kinds: ["drill.script"]), limit: 100_000))
            }()
            // A worker draining another kind for as long as the retry runs.
            var rounds = 0, slowest = Duration.zero
            while !retryDone.load(ordering: .acquiring) {
                let start = clock.now
                _ = try await q.queue.enqueue((0..<20).map { _ in NewJob(kind: .drillNoop) })
                let jobs = try await q.driver.jobClaim(ClaimRequest(owner: "w", lease: .seconds(30), slots: [.drillNoop: 20])).jobs
                _ = try await q.driver.jobFinishMany(owner: "w", outcomes: jobs.map { JobOutcome(jobID: $0.id, attempt: $0.attempt, kind: .completed(result: nil)) })
                slowest = max(slowest, clock.now - start)
                rounds += 1
            }
            #expect(try await retried.count == 100_000)
            let retryTook = clock.now - retryStarted
            print("bulk retry of 100,000 beside a drain: \(rounds) rounds of enqueue+claim+finish, slowest \(slowest), retry \(retryTook)")
            #expect(rounds >= 10, "the drain did not overlap the retry")
            // Batches: no round waits for more than a fraction of the whole retry (one long
            // statement would hold it for all of it). Relative, as a loaded machine slows both.
            #expect(slowest < retryTook / 4, "a claim waited \(slowest) of the retry's \(retryTook)")
        }
    }

    /// The operator commands as an operator types them, against a dispatcher's Unix socket.
    @Test func theCommandLineListsRetriesPausesAndShowsTheAuditTrail() async throws {
        try await TestDispatcher.run { dispatcher in
            let dead = try await Self.makeDead(dispatcher.queue, count: 3, code: "PROVIDER_DOWN")
            let socket = dispatcher.settings.socketPath!
            func dispatcherCommand(_ arguments: String...) async throws -> JSONValue {
                let output = temporaryPath("cli") + ".out"
                let status = try await ChildProcess.run(builtExecutable("dispatcher"), arguments + ["--dispatcher", socket], outputPath: output)
                let text = try String(contentsOfFile: output, encoding: .utf8)
                guard status == 0 else { throw TestFailure("dispatcher \(arguments.joined(separator: " ")) exited \(status): \(text)") }
                return try JSONValue(json: text)
            }
            let page = try await dispatcherCommand("jobs", "list", "--state", "dead", "--code", "PROVIDER_DOWN", "--since", "1h", "--limit", "2", "--json")
            guard case .array(let jobs)? = page["jobs"] else { throw TestFailure("no jobs in \(page.jsonText)") }
            #expect(jobs.map { $0["id"] } == dead.suffix(2).reversed().map { .number(Double($0)) })
            #expect(page["nextCursor"] != .null)
            #expect(try await dispatcherCommand("jobs", "retry", "--code", "PROVIDER_DOWN", "--since", "1h", "--dry-run")["count"] == .number(3))
            #expect(try await dispatcherCommand("retry", "\(dead[0])")["state"] == .string("available"))
            guard case .array(let errors)? = try await dispatcherCommand("job", "\(dead[0])")["errors"] else { throw TestFailure("no errors") }
            #expect(errors.map { $0["code"] } == [.string("PROVIDER_DOWN")])
            #expect(try await dispatcherCommand("pause", "drill.noop")["changed"] == .bool(true))
            #expect(try await dispatcherCommand("resume", "drill.noop")["changed"] == .bool(true))
            let audit = try await dispatcherCommand("audit")
            guard case .array(let entries)? = audit["entries"] else { throw TestFailure("no entries in \(audit.jsonText)") }
            #expect(entries.map { $0["action"] } == [.string("queue.resume"), .string("queue.pause"), .string("job.retry")])
            #expect(entries.allSatisfy { $0["actor"] == .string("unix-socket") })
        }
    }

    /// Limits as an operator sets them: over the socket (a read token sees, may not set) and by
    /// the command line; in the audit trail; taken by the claim at once.
    @Test func limitsAreSetListedAndRemovedByOperatorsOnly() async throws {
        try await TestDispatcher.run { dispatcher in
            let operatorClient = try await dispatcher.client(.tcp)
            let set = try await operatorClient.setLimit(key: "provider:p", maxRunning: 1, rate: 30)
            #expect(set.changed == true && set.limits.map(\.key) == ["provider:p"])
            // Limit keys travel in the enqueue's options; a bad one is refused naming the field.
            for _ in 0..<2 { _ = try await operatorClient.enqueue(kind: "drill.noop", options: JobOptions(limitKeys: ["provider:p"])) }
            await #expect(throws: DispatcherError(.badArgument, "args.options.limitKeys \"a b\" must be 1 to 100 of A-Z a-z 0-9 . _ : -")) {
                _ = try await operatorClient.enqueue(kind: "drill.noop", options: JobOptions(limitKeys: ["a b"]))
            }
            let claimed = try await dispatcher.queue.driver.jobClaim(
                ClaimRequest(owner: "w", lease: .seconds(30), slots: [.drillNoop: 5], limitedKinds: [.drillNoop]))
            #expect(claimed.jobs.count == 1 && claimed.heldBack == [.drillNoop])
            let listed = try await operatorClient.limits().limits
            #expect(listed == [LimitView(key: "provider:p", maxRunning: 1, rate: 30, rateWindowSeconds: 60, effectiveRate: 30,
                                         keys: [LimitView.KeyUse(key: "provider:p", running: 1, startedInWindow: 1, waiting: 1)])])
            await #expect(throws: DispatcherError.self) { _ = try await operatorClient.setLimit(key: "bad key", maxRunning: 1) }

            let token = try await AccessTokenStore(pool: dispatcher.queue.pool).create(name: "oncall", role: .read)
            try await dispatcher.waitUntilAccepted(token: token)
            let reader = try await dispatcher.client(.tcp, token: token)
            #expect(try await reader.limits().limits.count == 1)
            await #expect(throws: DispatcherError.self) { _ = try await reader.setLimit(key: "provider:p", maxRunning: 50) }

            let output = temporaryPath("cli") + ".out"
            let status = try await ChildProcess.run(builtExecutable("dispatcher"), ["limits", "remove", "provider:p", "--dispatcher", dispatcher.settings.socketPath!], outputPath: output)
            #expect(status == 0, "\((try? String(contentsOfFile: output, encoding: .utf8)) ?? "")")
            #expect(try await reader.limits().limits.isEmpty)
            let audit = try await operatorClient.auditTrail().entries
            #expect(audit.map(\.action) == ["limit.remove", "limit.set"])
            #expect(audit.map(\.actor) == ["unix-socket", AccessTokens.defaultTokenName])
        }
    }

    /// Jobs of `drill.script` that ended `dead` with `code`, oldest first.
    static func makeDead(_ q: TestQueue, count: Int, code: String) async throws -> [Int64] {
        let jobs = try await q.queue.enqueue((0..<count).map { _ in NewJob(kind: .drillScript, maxAttempts: 1) })
        let claimed = try await q.driver.jobClaim(ClaimRequest(owner: "w", lease: .seconds(30), slots: [.drillScript: count])).jobs
        _ = try await q.driver.jobFinishMany(owner: "w", outcomes: claimed.map {
            JobOutcome(jobID: $0.id, attempt: $0.attempt, kind: .dead(error: "failed", code: JobErrorCode(rawValue: code)))
        })
        return jobs.map(\.id)
    }
}

extension RawConnection {
    /// Sends `op` with no arguments and returns its answer.
    func response(of op: String) async throws -> JSONValue {
        try await send(#"{"id":"last","op":"\#(op)"}"# + "\n")
        return try await response()
    }
}

extension TestDispatcher {
    func unixClient() async throws -> DispatcherClient { try await client(.unix) }
}
