import FakeProviders
@testable import FleetCallbacks
import FleetPostgres
import FleetStorage
@testable import FleetQueue
import FleetSupport
@testable import FleetTestSupport
import Foundation
@testable import Renders
import Testing

/// A job that completes with a result, so the callback has one to carry.
struct ResultHandler: JobHandler {
    let kind = JobKind.drillNoop
    func run(_ job: ClaimedJob, context: JobContext) async throws -> JSONValue? { .object(["done": .bool(true)]) }
}

/// Completion callbacks against real PostgreSQL and a receiver on loopback: the database
/// enqueues `callback.deliver` in the transaction that ends the job or render, and the delivery
/// is signed, retried on 5xx with the same `webhook-id`, never on 4xx, never redirected.
@Suite struct CallbackDeliveryTests {
    @Test func aFinishedJobCallsBackSignedAndA503IsDeliveredAgainWithTheSameWebhookID() async throws {
        let rig = try await OutboundRig(answers: [.status(503, body: "busy")])
        var job = NewJob(kind: .drillNoop)
        job.callbackURL = rig.hookURL + "?tenant=acme"
        let enqueued = try await rig.q.queue.enqueue(job)
        let worker = rig.worker([ResultHandler()], concurrency: [.drillNoop: 1])
        let callbacks = try await rig.waitForEnded(.callbackDeliver)
        try await worker.stop()

        // One callback job for one ending, delivered on its second attempt.
        #expect(callbacks.count == 1)
        let callback = callbacks[0]
        #expect(callback.state == .completed && callback.attempt == 2)
        #expect(callback.errors.map(\.code) == ["HTTP_SERVER_ERROR"])
        #expect(callback.errors.first?.error.contains("503") == true && callback.errors.first?.error.contains("busy") == true)
        #expect(callback.result == #"{"status": 200}"#)

        // At the receiver: two POSTs, the same webhook-id, each verified by either secret (a rotation).
        let requests = rig.receiver.requests
        #expect(requests.map(\.method) == ["POST", "POST"] && requests.allSatisfy { $0.path == "/hook" && $0.query["tenant"] == "acme" })
        let ids = try requests.map { try rig.verifiedID($0, secrets: [rig.previous]) }
        #expect(try requests.map { try rig.verifiedID($0, secrets: [rig.current]) } == ids)
        #expect(ids == ["msg_cb_job_\(enqueued.id)_1", "msg_cb_job_\(enqueued.id)_1"])
        // The HTTP jobs' secrets never verify a callback (nor the callback secrets an HTTP job: HTTPJobTests).
        #expect(throws: StandardWebhookError.invalidSignature) { try rig.verifiedID(requests[0], secrets: [rig.httpJobCurrent, rig.httpJobPrevious]) }
        #expect(requests[0].body == requests[1].body)
        let event = try #require(requests[1].jsonValue)
        #expect(event["type"] == .string("job.finished") && event["jobId"] == .number(Double(enqueued.id)))
        #expect(event["state"] == .string("completed") && event["kind"] == .string("drill.noop") && event["errorCode"] == .null)
        #expect(event["result"] == .object(["done": .bool(true)]))
        #expect(requests[1].headers["content-type"] == "application/json")
        await rig.stop()
    }

    @Test func aReceiverRefusingWith4xxIsNotAskedAgainAndARedirectIsNotFollowed() async throws {
        let elsewhere = try await FakeReceiver.start()
        let rig = try await OutboundRig(answers: [.status(410, body: "gone: no such hook"), .redirect(to: elsewhere.baseURL + "/steal")])
        let jobs = try await rig.q.queue.enqueue((0..<2).map { _ in
            var job = NewJob(kind: .drillNoop)
            job.callbackURL = rig.hookURL
            return job
        })
        // One worker slot: the receiver answers the first delivery 410, the second 302.
        let worker = rig.worker([ResultHandler()], concurrency: [.drillNoop: 2, .callbackDeliver: 1])
        // Both ended dead: nothing delivers them again, and the stop waits for what is in flight.
        let callbacks = try await rig.waitForEnded(.callbackDeliver, count: 2)
        try await worker.stop()

        #expect(callbacks.map(\.state) == [.dead, .dead] && callbacks.map(\.attempt) == [1, 1])
        let codes = Set(callbacks.compactMap(\.errors.last?.code))
        #expect(codes == ["HTTP_CLIENT_ERROR", "HTTP_REDIRECT"])
        let refused = try #require(callbacks.first { $0.errors.last?.code == "HTTP_CLIENT_ERROR" })
        #expect(refused.errors.last?.error.contains("410: gone: no such hook") == true)
        // Asked once each, and nothing reached where the redirect pointed.
        #expect(rig.receiver.requests.count == 2)
        #expect(elsewhere.requests.isEmpty)
        #expect(Set(try callbacks.map { try #require($0.payload.jsonValue["webhookId"]) }) == Set(jobs.map { .string("msg_cb_job_\($0.id)_1") }))
        await elsewhere.stop()
        await rig.stop()
    }

    @Test func theCallbackIsEnqueuedInTheTransactionThatEndsTheJobAndOncePerEnding() async throws {
        let q = try await TestQueue.make()
        let traceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        try await q.pool.query("""
            INSERT INTO jobs (kind, state, attempt, lease_owner, callback_url, trace_parent)
            VALUES ('drill.noop', 'running', 1, 'w1', 'http://127.0.0.1:1/a', $1)
            """, [traceParent])
        let end = "UPDATE jobs SET state = 'completed', lease_owner = NULL, finished_at = now() WHERE kind = 'drill.noop'"
        let connection = try await PostgresConnection.connect(q.url)
        try await connection.query("BEGIN")
        try await connection.query(end)
        try await connection.query("ROLLBACK")
        let count = "SELECT count(*) AS n FROM jobs WHERE kind = 'callback.deliver'"
        #expect(try await q.pool.query(count).rows[0].int("n") == 0)
        try await connection.query("BEGIN")
        try await connection.query(end)
        try await connection.query("COMMIT")
        #expect(try await q.pool.query(count).rows[0].int("n") == 1)
        // The callback's delivery continues the job's trace.
        #expect(try await q.pool.query("SELECT trace_parent FROM jobs WHERE kind = 'callback.deliver'").rows[0]["trace_parent"] == traceParent)
        // Writing the end again is no second ending.
        try await q.pool.query(end)
        #expect(try await q.pool.query(count).rows[0].int("n") == 1)
        // A queued job cancelled ends too, and says so.
        var queued = NewJob(kind: .drillNoop)
        queued.callbackURL = "http://127.0.0.1:1/b"
        let cancelled = try await q.queue.enqueue(queued)
        _ = try await q.queue.cancel(id: cancelled.id)
        let payload = try await q.pool.query(
            "SELECT payload::text AS p FROM jobs WHERE idempotency_key = $1", ["callback:job:\(cancelled.id):0"]).rows[0].string("p")
        let event = try JSONValue(json: payload)["event"]
        #expect(event?["state"] == .string("cancelled") && event?["jobId"] == .number(Double(cancelled.id)))
        // Jobs without a callback get none.
        _ = try await q.queue.cancel(id: try await q.queue.enqueue(NewJob(kind: .drillNoop)).id)
        #expect(try await q.pool.query(count).rows[0].int("n") == 2)
    }

    @Test func aRenderCallsBackWhoeverEndsIt() async throws {
        let f = try await RenderFixture.make()
        let rig = try await OutboundRig(q: f.q)
        try await f.grant("u1", credits: 2)
        for id in ["r-done", "r-late"] {
            var request = RenderRequest(
                renderID: try StorageID(id), requester: .user("u1"), ownerID: try StorageID("u1"), garmentID: try StorageID("g1"),
                bodyPhotoID: try StorageID("b1"), category: .tops)
            request.callbackURL = rig.hookURL
            _ = try await f.requests.request(request)
        }
        // r-done was requested inside a trace, kept on its render.run job: its callback continues it.
        let traceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        try await f.q.pool.query(
            "UPDATE jobs SET trace_parent = $1 WHERE id = (SELECT job_id FROM renders WHERE id = 'r-done')", [traceParent])
        // One completed by its worker, one timed out by the dispatcher's sweep.
        _ = try await f.store.start(id: "r-done")
        try await f.store.recordSubmission(id: "r-done", cutout: false, submission: nil)
        #expect(try await f.store.complete(id: "r-done", resultPath: "u1/renders/r-done.jpg"))
        // r-late's deadline aged in the table rather than slept through (a loaded machine).
        try await f.q.pool.query("UPDATE renders SET deadline_at = now() - interval '1 second' WHERE id = 'r-late'")
        #expect(try await f.store.failExpired(limit: 10).map(\.id) == ["r-late"])

        let worker = rig.worker()
        let callbacks = try await rig.waitForEnded(.callbackDeliver, count: 2)
        try await worker.stop()
        #expect(callbacks.map(\.state) == [.completed, .completed])
        var events: [String: JSONValue] = [:]
        for request in rig.receiver.requests {
            events[try rig.verifiedID(request, secrets: [rig.current])] = request.jsonValue
        }
        #expect(events.count == 2)
        let done = try #require(events["msg_cb_render_r-done"])
        #expect(done["status"] == .string("complete") && done["resultPath"] == .string("u1/renders/r-done.jpg") && done["userId"] == .string("u1"))
        let late = try #require(events["msg_cb_render_r-late"])
        #expect(late["status"] == .string("failed") && late["errorCode"] == .string("RENDER_TIMEOUT") && late["type"] == .string("render.finished"))
        // Which garment image was sent: r-done's normalised photo; r-late read no input.
        #expect(done["garmentCutout"] == .bool(false) && late["garmentCutout"] == .null)
        // Why it failed, for the backend: explicit nulls on a complete render.
        #expect(late["failureCode"] == .string("TIMEOUT") && late["errorMessage"] == .string("the render's deadline passed before any worker finished it"), "\(late)")
        #expect(done["failureCode"] == .null && done["errorMessage"] == .null, "\(done)")
        let traces = try await f.q.pool.query(
            "SELECT trace_parent FROM jobs WHERE kind = 'callback.deliver' ORDER BY idempotency_key").rows.map { $0["trace_parent"] }
        #expect(traces == [traceParent, nil], "r-done's callback in its trace, r-late's (requested untraced) in none")
        await rig.stop()
    }
}

extension String {
    var jsonValue: JSONValue { (try? JSONValue(json: self)) ?? .null }
}
