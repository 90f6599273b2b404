import FakeProviders
import FleetHTTPClient
@testable import FleetQueue
import FleetStorage
import FleetSupport
@testable import FleetTestSupport
import Foundation
@testable import Imaging
import Logging
@testable import Providers
@testable import Renders
import Testing

@Suite struct RenderLifecycleTests {
    @Test func aRenderCompletesWithItsImageAndConsumesOneCredit() async throws {
        let f = try await RenderFixture.make()
        try await f.grant("u1", credits: 3)
        let render = try await f.request("r1")
        #expect(render.status == .pending && render.charged && render.userID == "u1")
        #expect(try await f.credits("u1") == (3, 0, 1))
        try await f.run(render)
        let done = try await f.reload(render)
        #expect(done.status == .complete && done.resultPath == "u1/renders/r1.jpg" && done.errorCode == nil)
        let image = try VipsImageRef.decode(Data(contentsOf: URL(fileURLWithPath: "\(f.root)/u1/renders/r1.jpg")))
        #expect(image.width == 1080 && image.height == 1920)
        #expect(try await f.credits("u1") == (3, 1, 0))
        #expect(try await f.ledger("r1") == ["reserve", "consume"])
        // Running the job again (a redelivery) changes nothing.
        try await f.run(render)
        #expect(try await f.credits("u1") == (3, 1, 0))
        // Asking again with the same render id returns the same render, charging nothing.
        #expect(try await f.request("r1").id == "r1")
        #expect(try await f.credits("u1") == (3, 1, 0))
    }

    @Test func withOneCreditLeftTwoConcurrentRequestsGetOneRender() async throws {
        let f = try await RenderFixture.make()
        try await f.grant("u1", credits: 1)
        func attempt(_ id: String) async -> RenderRequestError? {
            do { _ = try await f.request(id); return nil } catch { return error as? RenderRequestError }
        }
        async let first = attempt("ra")
        async let second = attempt("rb")
        let refused = await [first, second].compactMap { $0 }
        #expect(refused == [RenderRequestError.insufficientCredits])
        #expect(try await f.credits("u1") == (1, 0, 1))
        // With the credit spent, the next request is refused before any provider call.
        await #expect(throws: RenderRequestError.insufficientCredits) { _ = try await f.request("rc") }
        await #expect(throws: RenderRequestError.insufficientCredits) { _ = try await f.request("rd", user: "nobody") }
    }

    @Test func subscribersRenderWithoutCreditTracking() async throws {
        let f = try await RenderFixture.make()
        try await f.subscribe("u1", status: "subscribed", expiresIn: 86_400)
        try await f.subscribe("u2", status: "subscribed", expiresIn: -86_400)  // in Apple's billing grace
        for user in ["u1", "u2"] {
            let render = try await f.request("r-\(user)", user: user)
            #expect(!render.charged)
            try await f.run(render)
            #expect(try await f.reload(render).status == .complete)
            #expect(try await f.credits(user) == (0, 0, 0))
            #expect(try await f.ledger(render.id.value).isEmpty)
        }
        // Cancelled until the period ends; expired without credits is told so.
        try await f.subscribe("u3", status: "cancelled", expiresIn: 3600)
        #expect(!(try await f.request("r-u3", user: "u3")).charged)
        try await f.subscribe("u4", status: "expired", expiresIn: -3600)
        await #expect(throws: RenderRequestError.subscriptionExpired) { _ = try await f.request("r-u4", user: "u4") }
    }

    @Test func aThumbsDownRefundsTheCreditOnce() async throws {
        let f = try await RenderFixture.make()
        try await f.grant("u1", credits: 1)
        let render = try await f.request("r1")
        try await f.run(render)
        #expect(try await f.credits("u1") == (1, 1, 0))
        #expect(try await f.store.feedback(renderID: "r1", userID: "u1", vote: "down", category: "fit") == .recorded(refunded: true))
        #expect(try await f.store.feedback(renderID: "r1", userID: "u1", vote: "down", category: "fit") == .recorded(refunded: false))
        #expect(try await f.store.feedback(renderID: "r1", userID: "u2", vote: "down", category: nil) == .notFound)
        #expect(try await f.credits("u1") == (1, 0, 0))
        #expect(try await f.ledger("r1") == ["reserve", "consume", "refund"])
    }

    @Test func categoriesOffOrUnsupportedAreRefusedCostingNothing() async throws {
        let f = try await RenderFixture.make()
        try await f.grant("u1", credits: 5)
        try await RenderSettings(provider: LocalTryOnProvider.name, enabledCategories: [.tops]).save(to: f.q.pool)
        await #expect(throws: RenderRequestError.self) { _ = try await f.request("r1", category: .shoes) }
        try await RenderSettings(provider: FashnProvider.name, enabledCategories: Set(GarmentCategory.allCases)).save(to: f.q.pool)
        await #expect {
            _ = try await f.request("r2", category: .shoes)
        } throws: { error in
            if case RenderRequestError.invalidCategory = error { "\(error)".contains("fal-fashn") } else { false }
        }
        #expect(try await f.credits("u1") == (5, 0, 0))
        #expect(try await f.q.states().isEmpty)
    }

    @Test func anOnboardingTokenBuysOneRenderAndLinksToTheNewAccount() async throws {
        let f = try await RenderFixture.make()
        let tokens = EphemeralTokens(pool: f.q.pool, ttl: .seconds(3600))
        let issued = try await tokens.issue()
        let stored = try await f.q.pool.query("SELECT encode(token_hash, 'hex') AS h FROM ephemeral_tokens").rows[0]
        #expect(try stored.string("h") != issued.token && !(try stored.string("h")).contains(issued.token))
        func request(_ id: String, _ token: String) async throws -> RenderRecord {
            try await f.requests.request(RenderRequest(
                renderID: StorageID(id), requester: .ephemeralToken(token), ownerID: StorageID("onboarding"),
                garmentID: StorageID("g1"), bodyPhotoID: StorageID("b1"), category: .tops))
        }
        let render = try await request("r1", issued.token)
        #expect(render.userID == nil && render.ephemeralTokenID == issued.tokenID && !render.charged)
        await #expect(throws: RenderRequestError.tokenAlreadyUsed) { _ = try await request("r2", issued.token) }
        await #expect(throws: RenderRequestError.invalidToken) { _ = try await request("r3", "eph_forged") }
        try await f.run(render)
        #expect(try await f.reload(render).status == .complete)

        #expect(try await tokens.link(token: issued.token, userID: "u9", freeCredits: 2) == .linked(renderId: "r1", creditsGranted: 2))
        #expect(try await tokens.link(token: issued.token, userID: "u9", freeCredits: 2) == .invalidToken)
        let linked = try await f.reload(render)
        #expect(linked.userID == "u9" && linked.ephemeralTokenID == nil)
        #expect(try await f.credits("u9") == (2, 0, 0))
        #expect(try await f.store.renders(userID: "u9", limit: 10).map(\.id) == ["r1"])
        // The app retrying its request after the link gets the render, not a refusal.
        #expect(try await request("r1", issued.token).userID == "u9")
        await #expect(throws: RenderRequestError.invalidToken) { _ = try await request("r5", issued.token) }
        // An expired token authorises nothing.
        let short = EphemeralTokens(pool: f.q.pool, ttl: .milliseconds(1))
        let expired = try await short.issue()
        try await f.q.waitUntil("the token's expiry") {
            try await f.q.pool.query("SELECT now() > to_timestamp($1) AS past", [expired.expiresAt.timeIntervalSince1970]).rows[0].bool("past")
        }
        await #expect(throws: RenderRequestError.invalidToken) { _ = try await request("r4", expired.token) }
    }
}

/// Renders at fal's queue API (the fake speaking its wire format): retries, refusals, deadlines, callbacks.
@Suite struct FalRenderTests {
    func fixture(deadline: Duration = .seconds(30), _ behave: (inout FakeFal.Behavior) -> Void = { _ in }) async throws -> RenderFixture {
        let fal = try await FakeFal.start()
        fal.update(behave)
        let f = try await RenderFixture.make(provider: FashnProvider.name, deadline: deadline, fal: fal)
        try await f.grant("u1", credits: 2)
        return f
    }

    func submits(_ f: RenderFixture) -> Int { f.fal!.requests.filter { $0.method == "POST" }.count }

    /// A worker started `render`, submitted it to fal, kept the submission on the row and died.
    func orphan(_ f: RenderFixture, _ render: RenderRecord) async throws -> ProviderSubmission {
        // Started in SQL: a short deadline may already have passed on a loaded machine.
        try await f.q.pool.query("UPDATE renders SET status = 'processing' WHERE id = $1", [render.id.value])
        let person = TryOnImage(bytes: RenderFixture.bodyPhoto)
        let submission = try await f.handler.providers.provider(named: FashnProvider.name)
            .submit(TryOnRequest(person: person, garment: person, category: .tops))
        try await f.store.recordSubmission(id: render.id, cutout: false, submission: submission)
        return submission
    }

    /// Runs `render` in a handler that polls only after 20 s, so it learns its outcome from the
    /// stored callback alone; returns once fal's request id is on the row.
    func runAwaitingTheCallback(_ f: RenderFixture, _ render: RenderRecord) async throws -> (running: Task<RenderFixture.JobEnd, any Error>, requestID: String) {
        let handler = RenderHandler(store: f.handler.store, storage: f.handler.storage, providers: f.handler.providers,
                                    fetcher: f.handler.fetcher, events: f.handler.events,
                                    options: RenderOptions(webhookURL: nil, webhookGrace: .seconds(20), pollInterval: .seconds(10)))
        let running = Task { try await f.run(render, with: handler) }
        try await f.q.waitUntil("submitted") { try await f.reload(render).providerJobID != nil }
        return (running, try #require(try await f.reload(render).providerJobID))
    }

    @Test func aFalRenderCompletesByPolling() async throws {
        let f = try await fixture { $0.latency = .milliseconds(300) }
        defer { Task { await f.fal?.stop() } }
        let render = try await f.request("r1")
        try await f.run(render)
        let done = try await f.reload(render)
        #expect(done.status == .complete && done.providerJobID != nil)
        #expect(try await f.credits("u1") == (2, 1, 0) && submits(f) == 1)
    }

    @Test func aServerErrorIsRetriedOnceAndTwoEndTheRender() async throws {
        let f = try await fixture { $0.transientSubmitFailures = 1 }
        defer { Task { await f.fal?.stop() } }
        let once = try await f.request("r1")
        try await f.run(once)
        #expect(try await f.reload(once).status == .complete && submits(f) == 2)

        f.fal!.update { $0.transientSubmitFailures = 2 }
        let twice = try await f.request("r2")
        let end = try await f.run(twice)
        let failed = try await f.reload(twice)
        #expect(failed.status == .failed && failed.errorCode == "RENDER_FAILED" && submits(f) == 4)
        #expect(failed.failureCode == "PROVIDER_DOWN" && failed.errorMessage?.contains("HTTP 503") == true, "\(failed)")
        #expect(end == .dead(code: "PROVIDER_DOWN", message: try #require(failed.errorMessage)))
        #expect(try await f.credits("u1") == (2, 1, 0))
        #expect(try await f.ledger("r2") == ["reserve", "release"])
    }

    /// A 429 is the provider's capacity, not a fault: the render waits as told and submits
    /// again, its one retry still unused (a 503 after it is retried); the fleet halves the
    /// provider's rate for a while.
    @Test func aRateLimitIsWaitedOutWithoutSpendingTheRetryAndTheFleetEasesOff() async throws {
        let f = try await fixture { $0.rateLimitedSubmits = 2; $0.retryAfterSeconds = 1; $0.transientSubmitFailures = 1 }
        defer { Task { await f.fal?.stop() } }
        try await f.q.driver.limitSet(ConcurrencyLimit(key: RenderCapacity.providerKey(FashnProvider.name), maxRunning: 10, rate: 40), by: "test")
        let render = try await f.request("r1")
        let started = ContinuousClock.now
        try await f.run(render)
        #expect(try await f.reload(render).status == .complete)
        #expect(submits(f) == 4, "two 429s, one 503, one success")
        #expect(ContinuousClock.now - started >= .seconds(2), "waited the Retry-After twice")
        let rule = try #require(try await f.q.driver.limitList().first)
        #expect(rule.throttle?.from == 40 && rule.effectiveRate == 20, "halved once for the burst: \(rule)")
        #expect(try await f.credits("u1") == (2, 1, 0))
    }

    /// fal reads the submit and drops the connection before answering, every time: the
    /// worker's policy submits twice (once more after a dropped connection), and exactly two
    /// POSTs reach the server, not libcurl's own re-sends on top. A first render refused with a
    /// 422 leaves a kept-alive connection in the worker's pool, where the dropped submit goes.
    @Test func aSubmitDroppedAfterItsBodyArrivedReachesTheProviderTwiceAtMost() async throws {
        let refusal = #"{"detail":[{"loc":["body","model_image"],"msg":"person not detected","type":"value_error"}]}"#
        let server = try await DroppingHTTPServer { method, _, index in
            guard method == "POST" else { return .respond(status: 200, body: "{}") }
            return index == 0 ? .respond(status: 422, body: refusal) : .resetAfterBody
        }
        defer { Task { await server.stop() } }
        let f = try await RenderFixture.make(provider: FashnProvider.name, falQueueURL: server.baseURL)
        try await f.grant("u1", credits: 2)
        #expect(try await f.run(try await f.request("refused")).deadCode == "PROVIDER_REJECTED")
        let render = try await f.request("dropped")
        try await f.run(render)
        let failed = try await f.reload(render)
        #expect(failed.status == .failed && failed.errorCode == "RENDER_FAILED" && failed.failureCode == "PROVIDER_DOWN")
        #expect(server.received.filter { $0.method == "POST" }.count == 1 + 2, "\(server.received)")
        #expect(try await f.credits("u1") == (2, 0, 0))
    }

    /// fal answering its status or result with something that is not its documented JSON (an
    /// HTML page, a truncated body, wrong types): the read is made once more, then the render
    /// ends `RENDER_FAILED` with the credit released, seconds after the submit, not at the
    /// 30 s deadline.
    @Test(arguments: [FakeFal.Endpoint.status, .result], Garbage.allCases)
    func garbageFromTheProviderFailsTheRenderFast(_ endpoint: FakeFal.Endpoint, _ garbage: Garbage) async throws {
        let f = try await fixture { $0.malformed = [endpoint: garbage]; $0.latency = .zero }
        defer { Task { await f.fal?.stop() } }
        try await f.runExpectingAFastFailure(try await f.request("r1"))
        let reads = f.fal!.requests.filter { $0.method == "GET" && ($0.path.hasSuffix("/status") == (endpoint == .status)) }
        #expect(reads.count == 2, "\(f.fal!.requests.map { "\($0.method) \($0.path)" })")
        #expect(submits(f) == 1)
    }

    /// A submit answered with garbage may have been accepted (and billed) behind it: never sent
    /// again, the render ends at once.
    @Test(arguments: Garbage.allCases)
    func garbageAnsweringTheSubmitEndsTheRenderWithoutASecondSubmit(_ garbage: Garbage) async throws {
        let f = try await fixture { $0.malformed = [.submit: garbage] }
        defer { Task { await f.fal?.stop() } }
        try await f.runExpectingAFastFailure(try await f.request("r1"))
        #expect(submits(f) == 1)
    }

    /// A stored callback that is not fal's webhook JSON (wrong types): looked at once more, then
    /// the render ends `RENDER_FAILED` at once, though polling would start only after 20 s.
    @Test func aCallbackThatDoesNotDecodeFailsTheRenderFast() async throws {
        let f = try await fixture { $0.neverFinish = true }
        defer { Task { await f.fal?.stop() } }
        let render = try await f.request("r1")
        let (running, requestID) = try await runAwaitingTheCallback(f, render)
        let garbled = Data(#"{"request_id": 42, "status": "DONE", "payload": "no images"}"#.utf8)
        #expect(try await f.store.recordProviderEvent(provider: "fal", requestID: requestID, payload: garbled))
        // PROVIDER_DOWN, not the deadline's TIMEOUT: ended by the callback, not by waiting.
        #expect(try await running.value.deadCode == "PROVIDER_DOWN")
        let failed = try await f.reload(render)
        #expect(failed.status == .failed && failed.errorCode == "RENDER_FAILED" && failed.failureCode == "PROVIDER_DOWN")
        #expect(try await f.credits("u1") == (2, 0, 0))
        #expect(f.fal!.requests.filter { $0.method == "GET" }.isEmpty && submits(f) == 1)
    }

    @Test func aValidationErrorIsNeverRetried() async throws {
        let f = try await fixture { $0.rejection = .init(field: "model_image", message: "person not detected") }
        defer { Task { await f.fal?.stop() } }
        let render = try await f.request("r1")
        #expect(try await f.run(render).deadCode == "PROVIDER_REJECTED")
        let failed = try await f.reload(render)
        #expect(failed.status == .failed && failed.errorCode == "RENDER_FAILED" && submits(f) == 1)
        #expect(failed.failureCode == "PROVIDER_REJECTED" && failed.errorMessage?.contains("person not detected") == true, "\(failed)")
        #expect(try await f.credits("u1") == (2, 0, 0))
    }

    /// A refusal whose text echoes the request's credentials (fal's `Key`, a bearer token, a key
    /// in a query): the stored reason and the job's error say why the render failed and carry none
    /// of them.
    @Test func aFailureMessageNeverCarriesTheProvidersKeyOrABearerToken() async throws {
        let bearer = "ya29.a0AfH6SMBx-not-for-logs"
        let f = try await fixture {
            $0.rejection = .init(field: "model_image", message: "refused: Authorization: Key fake-fal-key, then Bearer \(bearer) at /v1?api_key=sk-live-42abc")
        }
        defer { Task { await f.fal?.stop() } }
        #expect(f.fal?.key == "fake-fal-key")
        let render = try await f.request("r1")
        let end = try await f.run(render)
        let failed = try await f.reload(render)
        let message = try #require(failed.errorMessage)
        #expect(failed.failureCode == "PROVIDER_REJECTED" && message.contains("refused") && message.contains("[redacted]"), "\(message)")
        for secret in ["fake-fal-key", bearer, "sk-live-42abc"] {
            #expect(!message.contains(secret), "\(message)")
            #expect(!"\(end)".contains(secret), "\(end)")
        }
        let stored = try await f.q.pool.query("SELECT row_to_json(r)::text AS row FROM renders r WHERE id = 'r1'").rows[0].string("row")
        #expect(!stored.contains("fake-fal-key") && !stored.contains(bearer), "\(stored)")
    }

    /// No key for the provider in the worker's settings: the fleet's fault, said so (naming the
    /// setting, not a value), the job dead at once.
    @Test func aProviderWithoutItsKeyFailsTheRenderAsMisconfigured() async throws {
        let f = try await RenderFixture.make(provider: FashnProvider.name)
        try await f.grant("u1", credits: 1)
        let render = try await f.request("r1")
        let end = try await f.run(render)
        let failed = try await f.reload(render)
        #expect(failed.status == .failed && failed.errorCode == "RENDER_FAILED" && failed.failureCode == "PROVIDER_MISCONFIGURED", "\(failed)")
        #expect(failed.errorMessage?.contains("FAL_KEY") == true && end.deadCode == "PROVIDER_MISCONFIGURED", "\(failed)")
        #expect(try await f.credits("u1") == (1, 0, 0))
        #expect(RenderFailureCode.providerMisconfigured.isTechnical && !RenderFailureCode.providerRejected.isTechnical)
    }

    /// 429s until the deadline: the render ends `RENDER_TIMEOUT`, and says it was the provider's
    /// rate limit, not a slow render. The deadline leaves a loaded machine's worker time for its
    /// first submits (a render never submitted is a plain timeout).
    @Test func aRateLimitLastingPastTheDeadlineEndsTheRenderRateLimited() async throws {
        let f = try await fixture(deadline: .seconds(15)) { $0.rateLimitedSubmits = 1000; $0.retryAfterSeconds = 1 }
        defer { Task { await f.fal?.stop() } }
        let render = try await f.request("r1")
        #expect(try await f.run(render).deadCode == "PROVIDER_RATE_LIMITED")
        let failed = try await f.reload(render)
        #expect(failed.status == .failed && failed.errorCode == "RENDER_TIMEOUT" && failed.failureCode == "PROVIDER_RATE_LIMITED", "\(failed)")
        #expect(failed.errorMessage?.contains("429") == true && submits(f) >= 2, "\(failed)")
        #expect(try await f.credits("u1") == (2, 0, 0))
    }

    /// 429s with no pause asked (`Retry-After: 0`): the render spends its time asking again, not
    /// waiting, and the deadline finds it mid-request; it still ends rate limited, since the
    /// provider's last answer was a 429.
    @Test func aRateLimitFoundMidRequestByTheDeadlineEndsTheRenderRateLimited() async throws {
        let f = try await fixture(deadline: .seconds(15)) { $0.rateLimitedSubmits = 1_000_000; $0.retryAfterSeconds = 0 }
        defer { Task { await f.fal?.stop() } }
        let render = try await f.request("r1")
        #expect(try await f.run(render).deadCode == "PROVIDER_RATE_LIMITED")
        let failed = try await f.reload(render)
        #expect(failed.status == .failed && failed.errorCode == "RENDER_TIMEOUT" && failed.failureCode == "PROVIDER_RATE_LIMITED", "\(failed)")
        #expect(submits(f) >= 2)
        #expect(try await f.credits("u1") == (2, 0, 0))
    }

    @Test func aProviderSlowerThanTheDeadlineTimesOutAndIsCancelled() async throws {
        // Long enough for the submit to happen first on a loaded machine.
        let f = try await fixture(deadline: .seconds(5)) { $0.neverFinish = true }
        defer { Task { await f.fal?.stop() } }
        let render = try await f.request("r1")
        #expect(try await f.run(render).deadCode == "TIMEOUT")
        let failed = try await f.reload(render)
        #expect(failed.status == .failed && failed.errorCode == "RENDER_TIMEOUT" && failed.failureCode == "TIMEOUT")
        #expect(try await f.credits("u1") == (2, 0, 0))
        #expect(f.fal!.cancelledRequestIDs == [try #require(failed.providerJobID)])
        // The result arriving afterwards does not revive it.
        #expect(try await f.store.complete(id: render.id, resultPath: "late.jpg") == false)
        #expect(try await f.reload(render).status == .failed)
    }

    /// A worker that took over an earlier attempt's fal job (its worker died) and reaches the
    /// deadline cancels that job at fal, as it would one it had submitted itself.
    @Test func aResumedJobIsCancelledAtFalWhenTheDeadlinePasses() async throws {
        let f = try await fixture(deadline: .seconds(2)) { $0.neverFinish = true }
        defer { Task { await f.fal?.stop() } }
        let render = try await f.request("r1")
        let earlier = try await orphan(f, render)
        try await f.run(render)
        #expect(try await f.reload(render).errorCode == "RENDER_TIMEOUT")
        #expect(f.fal!.cancelledRequestIDs == [earlier.jobID] && submits(f) == 1)
    }

    @Test func aCallbackCompletesTheRenderAndItsDuplicateIsAppliedOnce() async throws {
        // Finished at the fake as soon as submitted: the callback's result is there to fetch.
        let f = try await fixture { $0.latency = .zero }
        defer { Task { await f.fal?.stop() } }
        let render = try await f.request("r1")
        let (running, requestID) = try await runAwaitingTheCallback(f, render)
        let body = f.fal!.webhookBody(requestID: requestID)
        #expect(try await f.store.recordProviderEvent(provider: "fal", requestID: requestID, payload: body))
        #expect(try await f.store.recordProviderEvent(provider: "fal", requestID: requestID, payload: body) == false)
        _ = try await running.value
        #expect(try await f.reload(render).status == .complete)
        #expect(try await f.credits("u1") == (2, 1, 0))
        #expect(try await f.ledger("r1") == ["reserve", "consume"])
    }

    /// A callback whose announcement carries its body (`CallbackAnnouncement`) ends the render from
    /// there, with no poll: the table is not read (here it keeps nothing, a trigger deleting each
    /// event as it is stored, so a read would find nothing and poll fal at once).
    @Test func aCallbackCarriedByItsAnnouncementEndsTheRenderWithoutTheTable() async throws {
        let f = try await fixture { $0.latency = .zero }
        defer { Task { await f.fal?.stop() } }
        try await f.q.pool.query("""
            CREATE FUNCTION forget_provider_event() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN DELETE FROM provider_events WHERE provider = NEW.provider AND request_id = NEW.request_id; RETURN NULL; END $$
            """)
        try await f.q.pool.query(
            "CREATE TRIGGER forget_provider_event AFTER INSERT ON provider_events FOR EACH ROW EXECUTE FUNCTION forget_provider_event()")
        let render = try await f.request("r1")
        let (running, requestID) = try await runAwaitingTheCallback(f, render)
        #expect(try await f.store.recordProviderEvent(provider: "fal", requestID: requestID, payload: f.fal!.webhookBody(requestID: requestID)))
        _ = try await running.value
        #expect(try await f.reload(render).status == .complete)
        #expect(try await f.store.providerEvent(provider: "fal", requestID: requestID) == nil)
        #expect(!f.fal!.requests.contains { $0.method == "GET" && $0.path.hasSuffix("/status") }, "polled fal")
        #expect(try await f.credits("u1") == (2, 1, 0))
    }

    @Test func theSweepEndsRendersWhoseWorkerDiedAndReleasesTheirCredit() async throws {
        let f = try await fixture(deadline: .milliseconds(300)) { $0.neverFinish = true }
        defer { Task { await f.fal?.stop() } }
        let render = try await f.request("r1")
        // r2's worker submitted to fal, kept the submission on the row, and died.
        let submission = try await orphan(f, try await f.request("r2"))
        try await f.q.waitUntil("both deadlines past") {
            try await f.q.pool.query("SELECT count(*) AS n FROM renders WHERE deadline_at < now()").rows[0].int("n") == 2
        }
        let sweeper = RenderTimeoutSweeper(store: f.store, providers: f.handler.providers, logger: testLogger)
        #expect(try await Set(sweeper.runOnce()) == ["r1", "r2"])
        #expect(try await sweeper.runOnce().isEmpty)
        // The orphaned fal job is cancelled at fal (after the sweep returned), once; r1 never had one.
        try await f.q.waitUntil("cancelled at fal") { !f.fal!.cancelledRequestIDs.isEmpty }
        #expect(f.fal!.cancelledRequestIDs == [submission.jobID])
        let failed = try await f.reload(render)
        #expect(failed.status == .failed && failed.errorCode == "RENDER_TIMEOUT" && failed.failureCode == "TIMEOUT")
        #expect(try await f.credits("u1") == (2, 0, 0))
        #expect(try await f.ledger("r1") == ["reserve", "release"])
        // The job, run late, finds the render ended, calls no provider, and ends dead as its render did.
        #expect(try await f.run(render).deadCode == "TIMEOUT")
        #expect(submits(f) == 1)
        // Once: no second cancel came from the sweep's second pass or the job run since.
        #expect(f.fal!.cancelledRequestIDs == [submission.jobID])
    }
}

/// Google's predict is the submit and the result in one call: an answer to it that is not its
/// documented JSON (an HTML page, a truncated body, wrong types) may hide a paid prediction, so
/// it is never sent again and the render ends `RENDER_FAILED` at once, not at the deadline.
@Suite struct GoogleRenderTests {
    @Test(arguments: Garbage.allCases)
    func garbageAnsweringThePredictEndsTheRenderAtOnce(_ garbage: Garbage) async throws {
        let google = try await FakeGoogleVTO.start()
        defer { Task { await google.stop() } }
        google.update { $0.malformed = garbage }
        let f = try await RenderFixture.make(provider: GoogleVirtualTryOnProvider.name, environment: [
            "GOOGLE_CLOUD_PROJECT": google.project, "GOOGLE_VTO_ENDPOINT": google.baseURL, "GOOGLE_ACCESS_TOKEN": google.staticToken,
        ])
        try await f.grant("u1", credits: 2)
        try await f.runExpectingAFastFailure(try await f.request("r1"))
        #expect(google.predictRequests.count == 1)
    }
}

/// The render worker as a process, killed with SIGKILL in the middle of a render.
@Suite(.serialized) struct RenderWorkerProcessTests {
    @Test func aWorkerKilledMidRenderLeavesOneRenderOneSubmitOneCharge() async throws {
        let f = try await RenderFixture.atFal(latency: .seconds(4), credits: 1)
        let fal = f.fal!
        defer { Task { await fal.stop() } }
        let environment = f.workerEnvironment.merging(["FLEET_LEASE_SECONDS": "2"]) { $1 }
        let victim = try WorkerProcess(databaseURL: f.q.url, executable: "render-worker", environment: environment)
        let render = try await f.request("r1")
        try await f.q.waitUntil("submitted to fal") { try await f.reload(render).providerJobID != nil }
        victim.signal(SIGKILL)
        #expect(await victim.wait() != 0)

        let survivor = try WorkerProcess(databaseURL: f.q.url, executable: "render-worker", environment: environment)
        try await f.q.waitUntil(timeout: .seconds(30), "render ended") { try await f.reload(render).status.isTerminal }
        survivor.signal(SIGTERM)
        #expect(await survivor.wait() == 0, "\(survivor.log)")
        let done = try await f.reload(render)
        #expect(done.status == .complete, "\(done)")
        // The survivor asked fal for the job the victim submitted: one submit, one charge.
        #expect(fal.requests.filter { $0.method == "POST" }.count == 1)
        #expect(try await f.credits("u1") == (1, 1, 0))
        #expect(try await f.ledger("r1") == ["reserve", "consume"])
        let jobID = try #require(done.jobID)
        let job = try #require(try await f.q.queue.job(id: jobID))
        #expect(job.state == .completed && job.errors.map(\.code) == ["LEASE_EXPIRED"])
    }
}
