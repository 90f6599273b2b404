@testable import DispatcherCore
import DispatcherProtocol
import FakeProviders
@testable import FleetCallbacks
@testable import FleetQueue
import FleetSupport
@testable import FleetTestSupport
import Foundation
import Testing

/// `http.request` jobs against real PostgreSQL and a receiver on loopback: signed, their secret
/// header filled in from the settings (never stored), 2xx completes, 5xx/429/timeouts retry,
/// 4xx ends dead with the answer's first bytes, refused URLs are never called; the schedule
/// enqueues them once per slot with two dispatchers; the dispatcher refuses what could never run.
@Suite struct HTTPJobTests {
    func enqueue(_ rig: OutboundRig, _ payload: HTTPRequestPayload, maxAttempts: Int = 5) async throws -> Int64 {
        try await rig.q.queue.enqueue(try NewJob(payload, maxAttempts: maxAttempts)).id
    }

    @Test func aSignedRequestCarriesItsSecretHeaderAndCompletesOn2xx() async throws {
        let rig = try await OutboundRig(secrets: ["crm": "Bearer s3cret-token"])
        let id = try await enqueue(rig, HTTPRequestPayload(
            url: rig.receiver.baseURL + "/cron/trial-expiry", headers: ["X-Source": "fleet"], secretHeaders: ["Authorization": "crm"],
            body: .object(["dryRun": .bool(false)])))
        let worker = rig.worker()
        let job = try await rig.waitForEnded(.httpRequest)[0]
        try await worker.stop()

        #expect(job.state == .completed && job.attempt == 1 && job.result == #"{"status": 200}"#)
        let requests = rig.receiver.requests
        #expect(requests.count == 1)
        let request = try #require(requests.first)
        #expect(request.method == "POST" && request.path == "/cron/trial-expiry")
        #expect(request.headers["authorization"] == "Bearer s3cret-token" && request.headers["x-source"] == "fleet")
        #expect(request.headers["content-type"] == "application/json" && request.jsonValue == .object(["dryRun": .bool(false)]))
        #expect(try rig.verifiedID(request, secrets: [rig.httpJobCurrent]) == "msg_http_\(id)")
        // The secret is a reference in the stored payload, never its value.
        let stored = try await rig.q.pool.query("SELECT payload::text AS p FROM jobs WHERE id = $1", [id]).rows[0].string("p")
        #expect(!stored.contains("s3cret") && stored.contains(#""Authorization": "crm""#))
        await rig.stop()
    }

    @Test func fiveHundredsAnd429AreRetriedWithTheSameWebhookIDUntilA2xx() async throws {
        let rig = try await OutboundRig(answers: [.status(500, body: "boom"), .status(429, body: "slow down")])
        let id = try await enqueue(rig, HTTPRequestPayload(method: "put", url: rig.receiver.baseURL + "/orders/7/status", body: .object(["state": .string("shipped")])))
        let worker = rig.worker()
        let job = try await rig.waitForEnded(.httpRequest)[0]
        try await worker.stop()

        #expect(job.state == .completed && job.attempt == 3)
        #expect(job.errors.map(\.code) == ["HTTP_SERVER_ERROR", "HTTP_SERVER_ERROR"])
        #expect(job.errors.map { $0.error.contains("500: boom") || $0.error.contains("429: slow down") } == [true, true])
        let requests = rig.receiver.requests
        #expect(requests.map(\.method) == ["PUT", "PUT", "PUT"])
        #expect(try requests.map { try rig.verifiedID($0, secrets: [rig.httpJobPrevious]) } == Array(repeating: "msg_http_\(id)", count: 3))
        await rig.stop()
    }

    @Test func aTimeoutIsRetriedAndTheJobEndsDeadAfterItsAttempts() async throws {
        // The receiver would answer 200 after 20 s: only the 300 ms timeout ends the attempts as they end.
        let rig = try await OutboundRig(answers: [.delay(.seconds(20)), .delay(.seconds(20))])
        _ = try await enqueue(rig, HTTPRequestPayload(method: "GET", url: rig.receiver.baseURL + "/slow", timeoutMs: 300), maxAttempts: 2)
        let worker = rig.worker()
        let job = try await rig.waitForEnded(.httpRequest)[0]
        try await worker.stop()

        #expect(job.state == .dead && job.attempt == 2)
        #expect(job.errors.map(\.code) == ["HTTP_TIMEOUT", "HTTP_TIMEOUT"])
        #expect(rig.receiver.requests.map(\.method) == ["GET", "GET"])
        await rig.stop()
    }

    @Test func a4xxEndsDeadAtOnceWithTheStatusAndTheAnswersFirstBytes() async throws {
        let answer = "invalid cursor\n" + String(repeating: "x", count: 1000)
        let rig = try await OutboundRig(answers: [.status(422, body: answer)])
        _ = try await enqueue(rig, HTTPRequestPayload(url: rig.receiver.baseURL + "/cron/reminders"))
        let worker = rig.worker()
        // Ended dead: nothing runs it again, and the stop waits for what is in flight.
        let job = try await rig.waitForEnded(.httpRequest)[0]
        try await worker.stop()

        #expect(job.state == .dead && job.attempt == 1 && job.errors.map(\.code) == ["HTTP_CLIENT_ERROR"])
        let error = try #require(job.errors.first?.error)
        #expect(error.contains("422: invalid cursor x"))
        #expect(error.count < 400)  // the first 256 bytes of the answer, not all of it
        #expect(rig.receiver.requests.count == 1)
        await rig.stop()
    }

    @Test func aNameResolvingToLoopbackEndsDeadUnsent() async throws {
        // localhost is allowed by name only: it resolves to loopback, which only a literal entry allows.
        let probe = try await OutboundRig()
        let rig = try await OutboundRig(moreHosts: ["localhost:\(probe.receiver.port)"])
        _ = try await enqueue(rig, HTTPRequestPayload(url: "http://localhost:\(probe.receiver.port)/internal"))
        let worker = rig.worker()
        let job = try await rig.waitForEnded(.httpRequest)[0]
        try await worker.stop()

        #expect(job.state == .dead && job.attempt == 1 && job.errors.map(\.code) == ["URL_REFUSED"])
        #expect(job.errors.first?.error.contains("internal address") == true)
        #expect(probe.receiver.requests.isEmpty)
        await probe.stop()
        await rig.stop()
    }

    @Test func theConnectionGoesToTheAddressChecked() async throws {
        // receiver.test exists only in this resolver: curl, which would ask the system's DNS,
        // can reach it only through the address the policy resolved and pinned.
        let rig = try await OutboundRig()
        let port = rig.receiver.port
        let policy = OutboundPolicy(
            allowList: try OutboundPolicy.parse(entries: ["receiver.test:\(port)", "127.0.0.1:\(port)"], variable: "FLEET_OUTBOUND_HOSTS"),
            resolve: { _ in ["127.0.0.1"] })
        _ = try await enqueue(rig, HTTPRequestPayload(method: "DELETE", url: "http://receiver.test:\(port)/sessions/9"))
        let worker = rig.worker(policy: policy)
        let job = try await rig.waitForEnded(.httpRequest)[0]
        try await worker.stop()

        #expect(job.state == .completed, "\(job.errors)")
        let request = try #require(rig.receiver.requests.first)
        #expect(request.method == "DELETE" && request.path == "/sessions/9" && request.headers["host"] == "receiver.test:\(port)")
        await rig.stop()
    }

    @Test func theScheduleEnqueuesItOncePerSlotWithTwoDispatchers() async throws {
        let rig = try await OutboundRig()
        let line = #"* * * * * * => http.request {"url": "\#(rig.receiver.baseURL)/cron/tick", "body": {"from": "schedule"}}"#
        guard case .entry(let entry) = try ScheduleLine(line, vocabulary: MaintenanceTasks.vocabulary) else { throw TestFailure("not an entry") }
        let schedulers = ["dispatcher-a", "dispatcher-b"].map { owner in
            Scheduler(settings: ScheduleSettings(entries: [entry], lateness: .seconds(60)), slots: ScheduleSlots(pool: rig.q.pool),
                      owner: owner, perform: { _ in 0 }, logger: testLogger)
        }
        let base = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 - 600).rounded(.down))
        for second in 1...5 {
            let now = base.addingTimeInterval(TimeInterval(second) + 0.3)
            let outcomes = await withTaskGroup(of: Scheduler.Outcome.self) { group in
                for scheduler in schedulers { group.addTask { await scheduler.fire(entry, after: now.addingTimeInterval(-1), now: now) } }
                return await group.reduce(into: []) { $0.append($1) }
            }
            let slot = base.addingTimeInterval(TimeInterval(second))
            #expect(outcomes.filter { $0 == .fired(slot) }.count == 1 && outcomes.filter { $0 == .taken(slot) }.count == 1)
        }
        let worker = rig.worker()
        // All five ended: nothing runs them again, and the stop waits for what is in flight.
        let jobs = try await rig.waitForEnded(.httpRequest, count: 5)
        try await worker.stop()

        #expect(jobs.count == 5 && jobs.allSatisfy { $0.state == .completed })
        let requests = rig.receiver.requests
        #expect(requests.count == 5 && requests.allSatisfy { $0.path == "/cron/tick" && $0.jsonValue == .object(["from": .string("schedule")]) })
        #expect(Set(try requests.map { try rig.verifiedID($0, secrets: [rig.httpJobCurrent]) }) == Set(jobs.map { "msg_http_\($0.id)" }))
        await rig.stop()
    }

    @Test func aRequestImitatingACallbackNeverVerifiesWithTheCallbackSecret() async throws {
        // A submitter sends the callback receiver (necessarily allowed) a "render completed" event.
        let rig = try await OutboundRig()
        let event: JSONValue = .object([
            "type": .string("render.finished"), "renderId": .string("r-forged"), "status": .string("complete"), "errorCode": .null,
            "resultPath": .string("acct/renders/r-forged.png"),
        ])
        let accepted = try await EnqueueOperation(enqueuer: rig.q.queue, outbound: rig.settings).run(
            EnqueueRequest(kind: "http.request", payload: ["url": .string(rig.hookURL), "body": event]))
        let worker = rig.worker()
        let job = try await rig.waitForEnded(.httpRequest)[0]
        try await worker.stop()

        #expect(job.state == .completed)
        let requests = rig.receiver.requests
        #expect(requests.count == 1)
        let request = try #require(requests.first)
        #expect(request.path == "/hook" && request.jsonValue == event)
        // The receiver's verifyCallback, with either callback secret, rejects it ...
        #expect(throws: StandardWebhookError.invalidSignature) { try rig.verifiedID(request, secrets: [rig.current, rig.previous]) }
        // ... it is signed with the HTTP jobs' secrets, current and previous.
        #expect(try rig.verifiedID(request, secrets: [rig.httpJobCurrent]) == "msg_http_\(accepted.jobId)")
        #expect(try rig.verifiedID(request, secrets: [rig.httpJobPrevious]) == "msg_http_\(accepted.jobId)")
        await rig.stop()
    }

    @Test func withoutItsSecretHTTPJobsAreRefusedAndCallbacksStillDeliver() async throws {
        let rig = try await OutboundRig(httpJobSecret: false)
        #expect(rig.settings.isOn && rig.settings.httpJobSigner == nil)
        let enqueue = EnqueueOperation(enqueuer: rig.q.queue, outbound: rig.settings)
        let refusal = await #expect(throws: DispatcherError.self) {
            try await enqueue.run(EnqueueRequest(kind: "http.request", payload: ["url": .string(rig.hookURL)]))
        }
        #expect(refusal?.code == .badArgument && refusal?.message.contains("FLEET_HTTP_JOB_SECRET") == true)
        #expect(try await rig.q.pool.query("SELECT count(*) AS n FROM jobs").rows[0].int("n") == 0)

        let done = try await enqueue.run(EnqueueRequest(kind: "drill.noop", options: JobOptions(callbackUrl: rig.hookURL)))
        let worker = rig.worker([ResultHandler()], concurrency: [.drillNoop: 1])
        _ = try await rig.waitForEnded(.callbackDeliver)
        try await worker.stop()
        let request = try #require(rig.receiver.requests.first)
        #expect(rig.receiver.requests.count == 1)
        #expect(try rig.verifiedID(request, secrets: [rig.current]) == "msg_cb_job_\(done.jobId)_1")
        await rig.stop()
    }

    @Test func theDispatcherRefusesURLsAndRequestsThatCouldNeverBeSent() async throws {
        let rig = try await OutboundRig(secrets: ["crm": "Bearer s3cret-token"])
        let enqueue = EnqueueOperation(enqueuer: rig.q.queue, outbound: rig.settings)
        func refusal(_ request: EnqueueRequest) async -> String? {
            do {
                _ = try await enqueue.run(request)
                return nil
            } catch let error as DispatcherError {
                return error.code == .badArgument ? error.message : "\(error.code): \(error.message)"
            } catch {
                return "\(error)"
            }
        }
        let metadata = await refusal(EnqueueRequest(kind: "drill.noop", options: JobOptions(callbackUrl: "http://169.254.169.254/latest/meta-data/")))
        #expect(metadata?.contains("args.options.callbackUrl: 169.254.169.254:80 is not in FLEET_OUTBOUND_HOSTS") == true)
        #expect(await refusal(EnqueueRequest(kind: "drill.noop", options: JobOptions(callbackUrl: "http://[::1]:\(rig.receiver.port)/"))) != nil)
        let unknownSecret = await refusal(EnqueueRequest(kind: "http.request", payload: [
            "url": .string(rig.hookURL), "secretHeaders": .object(["Authorization": .string("billing")]),
        ]))
        #expect(unknownSecret == "args.payload.secretHeaders.Authorization: no secret 'billing' in FLEET_OUTBOUND_SECRETS")
        #expect(await refusal(EnqueueRequest(kind: "http.request", payload: ["url": .string("http://localhost:1/")])) != nil)
        #expect(await refusal(EnqueueRequest(kind: "http.request", payload: ["url": .string(rig.hookURL), "method": .string("TRACE")])) != nil)
        #expect(await refusal(EnqueueRequest(kind: "http.request", payload: [
            "url": .string(rig.hookURL), "headers": .object(["webhook-signature": .string("v1,forged")]),
        ])) != nil)
        // A signed event of the fleet's is made only by a real ending, never by a submitter.
        let forged = await refusal(EnqueueRequest(kind: "callback.deliver", payload: [
            "url": .string(rig.hookURL), "webhookId": .string("msg_cb_render_r1"), "event": .object(["status": .string("complete")]),
        ]))
        #expect(forged?.hasPrefix("callback.deliver jobs are made by the fleet") == true)
        #expect(try await rig.q.pool.query("SELECT count(*) AS n FROM jobs").rows[0].int("n") == 0)

        // Accepted: the URL is kept on the job for its callback.
        let accepted = try await enqueue.run(EnqueueRequest(kind: "http.request", payload: [
            "url": .string(rig.hookURL), "secretHeaders": .object(["Authorization": .string("crm")]),
        ], options: JobOptions(callbackUrl: rig.hookURL + "/done")))
        let url = try await rig.q.pool.query("SELECT callback_url FROM jobs WHERE id = $1", [accepted.jobId]).rows[0]["callback_url"]
        #expect(url == rig.hookURL + "/done")
        await rig.stop()
    }
}
