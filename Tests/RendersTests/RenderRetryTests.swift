@testable import DispatcherProtocol
import FakeProviders
@testable import FleetAccess
import FleetCallbacks
import FleetHTTPClient
import FleetPostgres
import FleetQueue
import FleetStorage
import FleetSupport
@testable import FleetTestSupport
import Foundation
@testable import Imaging
@testable import Renders
import Testing

/// Operators retrying failed renders (`render.retry`): the render as a whole, in one transaction,
/// its credit reserved again, its job (and a failed input's) run again, its callback sent again;
/// and the queue's own retries leaving an ended render's job alone.
@Suite(.serialized) struct RenderRetryTests {
    /// A render failed by fal's 5xx, retried by an operator once fal is back: every piece a real
    /// process (`dispatcher` with its callback worker, `render-worker`), fal and the backend's
    /// callback endpoint fakes on loopback.
    @Test func aRenderFailedByTheProviders5xxIsRetriedByAnOperatorAndCompletesChargedOnceAndCalledBackAgain() async throws {
        let (q, root) = try await EndToEndRenderTests.falRenderOfU1()
        let submitToken = try await AccessTokenStore(pool: q.pool).create(name: "backend", role: .submit)

        let fal = try await FakeFal.start()
        // Two 503s: the submit and its one retry; the render fails at once, RENDER_FAILED.
        fal.update { $0.latency = .milliseconds(200); $0.transientSubmitFailures = 2 }
        let receiver = try await FakeReceiver.start()
        let callbackSecret = "whsec_" + Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
        let socket = temporaryPath("dispatcher") + ".sock"
        let tcpPort = try freePort()
        let httpPort = try freePort()
        let dispatcher = try WorkerProcess(databaseURL: q.url, executable: "dispatcher", environment: [
            "FLEET_DISPATCHER_TCP": "127.0.0.1:\(tcpPort)", "FLEET_DISPATCHER_TOKEN": "operator-token-0123456789",
            "FLEET_DISPATCHER_SOCKET": socket, "FLEET_HTTP_ADDRESS": "127.0.0.1:\(httpPort)", "FLEET_STORAGE_ROOT": root,
            "FLEET_OUTBOUND_HOSTS": "127.0.0.1:\(receiver.port)", "FLEET_CALLBACK_SECRET": callbackSecret,
        ])
        let worker = try WorkerProcess(databaseURL: q.url, executable: "render-worker", environment: [
            "FAL_KEY": fal.key, "FAL_QUEUE_URL": fal.baseURL, "FLEET_RENDER_POLL_MS": "200", "FLEET_STORAGE_ROOT": root,
        ])
        defer {
            dispatcher.signal(SIGKILL)
            worker.signal(SIGKILL)
            try? FileManager.default.removeItem(atPath: root)
        }
        let ping = try await ChildProcess.run(builtExecutable("dispatcher"), ["ping", "--dispatcher", socket, "--wait", "60"])
        #expect(ping == 0, "dispatcher log: \(dispatcher.log)")
        let client = try await DispatcherClient.connect(to: .unix(path: socket))
        let request = RequestRenderRequest(
            renderId: "r1", userId: "u1", garmentId: "g1", bodyPhotoId: "b1", category: "tops", callbackUrl: receiver.baseURL + "/hook")
        _ = try await client.send(request)
        let failed = try await client.send(WaitRenderRequest(renderId: "r1", timeoutMs: 30_000)).render
        #expect(failed.status == .failed && failed.errorCode == "RENDER_FAILED", "worker log: \(worker.log)")
        #expect(fal.requests.filter { $0.method == "POST" }.count == 2)
        try await q.waitUntil("the failure's callback was delivered") { receiver.requests.count == 1 }
        // Asked again with its id, the render is the failed one: nothing new, nothing charged.
        #expect(try await client.send(request).status == .failed)

        // A backend's token may not retry renders.
        let backend = try await DispatcherClient.connect(to: .tcp(host: "127.0.0.1", port: tcpPort), token: submitToken)
        do {
            _ = try await backend.retryRender(id: "r1")
            Issue.record("a submit token retried a render")
        } catch let error as DispatcherError {
            #expect(error.code == .forbidden)
        }
        await backend.close()

        // The operator finds it and asks what a retry would do: nothing changes.
        let jobsBefore = try await q.pool.query("SELECT count(*) AS n FROM jobs").rows[0].int("n")
        let dryRun = try await dispatcherCommand(socket, "renders", "retry", "--error-code", "RENDER_FAILED", "--since", "1h", "--dry-run", "--json")
        #expect(dryRun["count"] == .number(1) && dryRun["renderIds"] == .array([.string("r1")]) && dryRun["dryRun"] == .bool(true))
        let table = try await dispatcherOutput(socket, "renders", "retry", "--error-code", "RENDER_FAILED", "--dry-run")
        #expect(table.contains("r1") && table.contains("would retry"), "\(table)")
        #expect(try await client.send(RenderStatusRequest(renderId: "r1")) == failed)
        #expect(try await ledger(q, "r1") == ["reserve:r1", "release:r1"])
        #expect(try await q.pool.query("SELECT count(*) AS n FROM jobs").rows[0].int("n") == jobsBefore)

        // fal is back; the operator retries it by the command line.
        let retried = try await dispatcherOutput(socket, "render", "retry", "r1")
        #expect(retried.contains("r1") && retried.contains("1 retried, 0 refused"), "\(retried)")
        let done = try await client.send(WaitRenderRequest(renderId: "r1", timeoutMs: 30_000)).render
        #expect(done.status == .complete && done.resultPath == "u1/renders/r1.jpg" && done.errorCode == nil, "worker log: \(worker.log)")
        #expect(done.deadlineAt > failed.deadlineAt)
        #expect(fal.requests.filter { $0.method == "POST" }.count == 3)

        // One credit consumed; each step of the ledger once, under its own key.
        let credits = try await q.pool.query("""
            SELECT total_consumed, (SELECT count(*) FROM credit_reservations) AS reserved FROM credits WHERE user_id = 'u1'
            """).rows[0]
        #expect(try credits.int("total_consumed") == 1 && credits.int("reserved") == 0)
        #expect(try await ledger(q, "r1") == ["reserve:r1", "release:r1", "reserve:r1:1", "consume:r1"])

        // The backend is told of the new end, under a new webhook id.
        try await q.waitUntil("the retried render's callback was delivered") { receiver.requests.count == 2 }
        let deliveries = try receiver.requests.map { request in
            (id: try StandardWebhook(secrets: [callbackSecret]).verify(headers: request.headers, body: request.body), event: request.jsonValue)
        }
        #expect(deliveries.map(\.id) == ["msg_cb_render_r1", "msg_cb_render_r1_1"])
        #expect(deliveries[0].event?["status"] == .string("failed") && deliveries[0].event?["retries"] == .number(0))
        #expect(deliveries[1].event?["status"] == .string("complete") && deliveries[1].event?["retries"] == .number(1))

        let metrics = try await CurlHTTPClient().execute(HTTPClientRequest(url: "http://127.0.0.1:\(httpPort)/metrics")).text
        #expect(metrics.contains("fleet_render_retries_total{provider=\"fal-fashn\"} 1"), "\(metrics.prefix(3000))")
        let audit = try await client.auditTrail().entries
        #expect(audit.map(\.action) == ["render.retry"] && audit[0].actor == "unix-socket" && audit[0].target["renderId"] == .string("r1"))
        await client.close()
        dispatcher.signal(SIGTERM)
        worker.signal(SIGTERM)
        #expect(await dispatcher.wait() == 0)
        #expect(await worker.wait() == 0)
        await fal.stop()
        await receiver.stop()
    }

    /// The issue's finding: a render failed because its body photo's upload was not an image. The
    /// queue's retries leave its cancelled job alone (it would wait for a dead input, and the
    /// render is over); the render's retry, once the upload is fixed, makes the photo again and runs.
    @Test func aRenderWhoseInputDiedIsLeftAloneByJobRetriesAndRetriedWithItsInputByTheOperator() async throws {
        let fleet = try await EarlyRenderTests.Fleet.start(cutout: [], bodyUpload: Data("not an image".utf8))
        _ = try await fleet.requestRender()
        let render = try await fleet.waitForRender()
        #expect(render.status == .failed && render.errorCode == "RENDER_FAILED", "\(fleet.logs)")
        let jobs = try await fleet.inputJobs(of: render)
        #expect(jobs.body.state == .dead && jobs.run.state == .cancelled)

        // Bulk: the render's job is counted apart, with why; the dead normalisation would be retried.
        let client = fleet.client
        let renderJobs = JobFilterArguments(kinds: ["render.run"])
        let leftAlone = BulkJobsResult.LeftAlone(
            reason: "its render has failed: retry the render (render.retry), which reserves its credit again", count: 1, sampleJobIds: [jobs.run.id])
        #expect(try await client.retryJobs(renderJobs, limit: 100, dryRun: true) == BulkJobsResult(count: 0, dryRun: true, leftAlone: [leftAlone]))
        #expect(try await client.retryJobs(JobFilterArguments(), limit: 100, dryRun: true) == BulkJobsResult(count: 1, dryRun: true, leftAlone: [leftAlone]))
        #expect(try await client.retryJobs(renderJobs, limit: 100) == BulkJobsResult(count: 0, dryRun: false, leftAlone: [leftAlone]))
        #expect(try await fleet.job(jobs.run.id).state == .cancelled)
        // One job: refused, naming what to do.
        await #expect(throws: DispatcherError(.jobNotRetryable, "job \(jobs.run.id) is left as it is: \(leftAlone.reason); instead: dispatcher render retry r1")) {
            _ = try await client.retryJob(id: jobs.run.id)
        }
        #expect(try await fleet.job(jobs.run.id).state == .cancelled)
        #expect(try await fleet.credits().ledger == ["reserve", "release"])

        // The upload is fixed; the operator retries the render.
        try AtomicFile.write(RenderFixture.bodyPhoto, to: "\(fleet.root)/u1/uploads/upB")
        #expect(try await client.retryRender(id: "r1") == RetryRendersRequest.Result(dryRun: false, renderIds: ["r1"]))
        // Asked again at once: refused, however far the worker has got with it.
        await #expect {
            _ = try await client.retryRender(id: "r1")
        } throws: { error in
            ["pending", "processing", "complete"].map { DispatcherError(.renderNotRetryable, "render r1 is \($0); only failed renders are retried") }
                .contains { $0 == error as? DispatcherError }
        }
        let done = try await fleet.waitForRender()
        #expect(done.status == .complete, "\(fleet.logs)")
        let body = try await fleet.job(jobs.body.id)
        #expect(body.state == .completed && body.attempt == 2 && body.errors.first?.code == "IMAGE_INVALID")
        let run = try await fleet.endedJob(of: done)
        #expect(run.id == jobs.run.id && run.state == .completed && run.attempt == 1, "\(run)")
        #expect(fleet.submits.count == 1)
        let credits = try await fleet.credits()
        #expect(credits.consumed == 1 && credits.ledger == ["reserve", "release", "reserve", "consume"])
        await fleet.stop()
    }

    /// The product's rules on a retry, in-process against PostgreSQL: no credit left, refused and
    /// still failed; a render not failed, refused; an onboarding render never charged.
    @Test func aRetryReservesAgainOrIsRefusedAndAnOnboardingRenderIsNeverCharged() async throws {
        let f = try await RenderFixture.make()
        let retries = RenderRetries(pool: f.q.pool)
        try await f.grant("u1", credits: 1)
        let first = try await f.request("r1")
        try await fail(f, first)
        #expect(try await f.credits("u1") == (1, 0, 0))
        // Its credit goes to another render meanwhile.
        let second = try await f.request("r2")
        await #expect(throws: RenderRequestError.insufficientCredits) { _ = try await retries.retry(id: "r1") }
        let refused = try await f.reload(first)
        #expect(refused.status == .failed && refused.retries == 0 && refused.jobID == first.jobID)
        #expect(try await f.q.queue.job(id: try #require(first.jobID))?.state == .cancelled)
        #expect(try await f.ledger("r1") == ["reserve", "release"])
        await #expect(throws: RenderRetryError.notFailed("r2", .pending)) { _ = try await retries.retry(id: "r2") }
        await #expect(throws: RenderRetryError.notFound("r9")) { _ = try await retries.retry(id: "r9") }
        // r2 fails too, freeing the credit: r1's retry reserves it, and r1 completes charged once.
        try await fail(f, second)
        let reopened = try await retries.retry(id: "r1")
        #expect(reopened.status == .pending && reopened.retries == 1 && reopened.deadlineAt > refused.deadlineAt)
        #expect(try await f.credits("u1") == (1, 0, 1))
        try await f.run(reopened)
        #expect(try await f.reload(first).status == .complete)
        #expect(try await f.credits("u1") == (1, 1, 0))
        #expect(try await f.ledger("r1") == ["reserve", "release", "reserve", "consume"])

        // An onboarding render, its token linked to an account without credit: retried, not charged.
        let tokens = EphemeralTokens(pool: f.q.pool, ttl: .seconds(3600))
        let issued = try await tokens.issue()
        let onboarding = try await f.requests.request(RenderRequest(
            renderID: StorageID("r-onboarding"), requester: .ephemeralToken(issued.token), ownerID: StorageID("onboarding"),
            garmentID: StorageID("g1"), bodyPhotoID: StorageID("b1"), category: .tops))
        try await fail(f, onboarding)
        #expect(try await tokens.link(token: issued.token, userID: "u9", freeCredits: 0) == .linked(renderId: "r-onboarding", creditsGranted: 0))
        let retried = try await retries.retry(id: "r-onboarding")
        #expect(retried.status == .pending && !retried.charged && retried.userID == "u9")
        try await f.run(retried)
        #expect(try await f.reload(retried).status == .complete)
        #expect(try await f.credits("u9") == (0, 0, 0))
        #expect(try await f.ledger("r-onboarding").isEmpty)
    }

    /// A render the provider refused for its photo is not retried by filter, which finds the
    /// technical failure beside it; named by id (its cause fixed), it is.
    @Test func aRenderFailedForItsPhotoIsRetriedOnlyByItsId() async throws {
        let f = try await RenderFixture.make()
        let retries = RenderRetries(pool: f.q.pool)
        try await f.grant("u1", credits: 2)
        let photo = try await f.request("r-photo")
        _ = try await f.q.queue.cancel(id: try #require(photo.jobID))
        #expect(try await f.store.fail(id: photo.id, failure: RenderFailure(.providerRejected, "the provider refused the photo")))
        try await fail(f, try await f.request("r-down"))
        #expect(try await retries.failed(.init(limit: 10)) == ["r-down"])
        #expect(try await retries.failed(.init(failureCode: "PROVIDER_DOWN", limit: 10)) == ["r-down"])
        #expect(try await retries.failed(.init(failureCode: "PROVIDER_REJECTED", limit: 10)).isEmpty)
        #expect(try await retries.failed(.init(failureCode: "TIMEOUT", limit: 10)).isEmpty)
        #expect(try await f.reload(photo).status == .failed)
        let reopened = try await retries.retry(id: "r-photo")
        #expect(reopened.status == .pending && reopened.failureCode == nil && reopened.errorMessage == nil)
        #expect(try await f.ledger("r-photo") == ["reserve", "release", "reserve"])
    }

    /// Ends `render` as a provider fault would, its job already over (cancelled here: the fixture
    /// runs no worker), its credit released.
    private func fail(_ f: RenderFixture, _ render: RenderRecord) async throws {
        _ = try await f.q.queue.cancel(id: try #require(render.jobID))
        #expect(try await f.store.fail(id: render.id, failure: RenderFailure(.providerDown, "fal answered 503")))
    }

    private func ledger(_ q: TestQueue, _ render: String) async throws -> [String] {
        try await q.pool.query("SELECT key FROM credit_ledger WHERE render_id = $1 ORDER BY id", [render]).rows.map { try $0.string("key") }
    }

    /// `dispatcher <arguments> --dispatcher <socket>`'s output; fails the test on a non-zero exit.
    private func dispatcherOutput(_ socket: String, _ arguments: String...) async throws -> String {
        try await run(socket, arguments)
    }

    /// As `dispatcherOutput`, the output read as JSON (`--json`).
    private func dispatcherCommand(_ socket: String, _ arguments: String...) async throws -> JSONValue {
        try JSONValue(json: try await run(socket, arguments))
    }

    private func run(_ socket: String, _ arguments: [String]) async throws -> String {
        let output = temporaryPath("cli") + ".out"
        let status = try await ChildProcess.run(builtExecutable("dispatcher"), arguments + ["--dispatcher", socket], outputPath: output)
        let text = try String(contentsOfFile: output, encoding: .utf8)
        guard status == 0 else { throw TestFailure("dispatcher \(arguments.joined(separator: " ")) exited \(status): \(text)") }
        return text
    }
}
