@testable import DispatcherProtocol
import FleetSupport
@testable import FleetTestSupport
import Foundation
@testable import Renders
import Testing

/// The render and onboarding ops over a real socket: the business codes, waits woken by the
/// render's own notification, feedback refunds once, tokens and linking.
@Suite struct RenderOperationTests {
    static func grant(_ dispatcher: TestDispatcher, _ user: String, credits: Int) async throws {
        try await dispatcher.queue.pool.query("INSERT INTO credits (user_id, total_granted) VALUES ($1, $2)", [user, credits])
    }

    static func credits(_ dispatcher: TestDispatcher, _ user: String) async throws -> (granted: Int, consumed: Int) {
        let row = try await dispatcher.queue.pool.query(
            "SELECT total_granted, total_consumed FROM credits WHERE user_id = $1", [user]).rows[0]
        return (try row.int("total_granted"), try row.int("total_consumed"))
    }

    static func request(_ id: String, user: String = "u1", category: String = "tops") -> RequestRenderRequest {
        RequestRenderRequest(renderId: id, userId: user, garmentId: "g1", bodyPhotoId: "b1", category: category)
    }

    /// The error code `body` ends with, or nil when it succeeds.
    static func code(_ body: () async throws -> some Any) async -> String? {
        do { _ = try await body(); return nil } catch let error as DispatcherError { return error.code.rawValue } catch { return "\(error)" }
    }

    @Test func aRenderRequestReservesTheCreditAndRefusalsCarryTheirCodes() async throws {
        try await TestDispatcher.run { dispatcher in
            let client = try await dispatcher.client(.tcp)
            try await Self.grant(dispatcher, "u1", credits: 1)
            let render = try await client.send(Self.request("r1"))
            #expect(render.status == .pending && render.charged && render.userId == "u1" && render.provider == "local")
            #expect(render.jobId != nil && render.resultPath == nil && render.errorCode == nil)
            // The same id again is the same render, not a second charge.
            #expect(try await client.send(Self.request("r1")).id == "r1")
            #expect(await Self.code { try await client.send(Self.request("r2")) } == "INSUFFICIENT_CREDITS")
            #expect(await Self.code { try await client.send(Self.request("r3", user: "nobody")) } == "INSUFFICIENT_CREDITS")
            #expect(await Self.code { try await client.send(Self.request("r4", category: "hats")) } == "INVALID_CATEGORY")
            try await RenderSettings(provider: "local", enabledCategories: [.tops]).save(to: dispatcher.queue.pool)
            // The dispatcher decides on the settings it reads every few milliseconds (docs/renders.md,
            // "Where admission's numbers come from"): until its next read a request sees the old
            // categories, and u1's credit is spent, so nothing is created meanwhile.
            try await dispatcher.queue.waitUntil(timeout: .seconds(10), "the dispatcher to read the enabled categories") {
                await Self.code { try await client.send(Self.request("r5", category: "shoes")) } == "INVALID_CATEGORY"
            }
            #expect(await Self.code { try await client.send(Self.request("../r6")) } == "BAD_ARGUMENT")
            let both = RequestRenderRequest(renderId: "r7", userId: "u1", ephemeralToken: "eph_x", garmentId: "g1", bodyPhotoId: "b1", category: "tops")
            #expect(await Self.code { try await client.send(both) } == "BAD_ARGUMENT")
            let neither = RequestRenderRequest(renderId: "r8", garmentId: "g1", bodyPhotoId: "b1", category: "tops")
            #expect(await Self.code { try await client.send(neither) } == "BAD_ARGUMENT")
            // Refusals charged nothing: one reservation, for r1.
            let reserved = try await dispatcher.queue.pool.query("SELECT render_id FROM credit_reservations").rows.map { try $0.string("render_id") }
            #expect(reserved == ["r1"])
            #expect(await Self.code { try await client.send(RenderStatusRequest(renderId: "r2")) } == "NOT_FOUND")
            // No render can have an id that names no file: refused as such, not looked for.
            #expect(await Self.code { try await client.send(RenderStatusRequest(renderId: "../r1")) } == "BAD_ARGUMENT")
            #expect(await Self.code { try await client.send(RenderFeedbackRequest(renderId: "r 1", userId: "u1", vote: .down)) } == "BAD_ARGUMENT")
            await client.close()
        }
    }

    @Test func renderWaitIsWokenWhenTheRenderEndsAndTimesOutOtherwise() async throws {
        // No recheck within the test: only the notification can end the waits before their timeout.
        try await TestDispatcher.run(renderRecheck: .seconds(3600)) { dispatcher in
            let client = try await dispatcher.client()
            try await Self.grant(dispatcher, "u1", credits: 5)
            let store = RenderStore(pool: dispatcher.queue.pool)
            for id in ["done", "broken", "stuck"] { _ = try await client.send(Self.request(id)) }

            async let completed = client.send(WaitRenderRequest(renderId: "done", timeoutMs: 120_000))
            async let failed = client.send(WaitRenderRequest(renderId: "broken", timeoutMs: 120_000))
            try await dispatcher.waitUntilWaited(.render("done"))
            try await dispatcher.waitUntilWaited(.render("broken"))
            guard case .started = try await store.start(id: "done") else { Issue.record("not started"); return }
            #expect(try await store.complete(id: "done", resultPath: "u1/renders/done.jpg"))
            #expect(try await store.fail(id: "broken", failure: RenderFailure(.providerDown, "fake: HTTP 503")))
            let (done, broken) = try await (completed, failed)
            #expect(!done.timedOut && done.render.status == .complete && done.render.resultPath == "u1/renders/done.jpg")
            #expect(!broken.timedOut && broken.render.status == .failed && broken.render.errorCode == "RENDER_FAILED")

            let stuck = try await client.send(WaitRenderRequest(renderId: "stuck", timeoutMs: 200))
            #expect(stuck.timedOut && stuck.render.status == .pending)
            // A render already ended answers at once.
            #expect(try await client.send(WaitRenderRequest(renderId: "done", timeoutMs: 0)).render.status == .complete)
            #expect(await Self.code { try await client.send(WaitRenderRequest(renderId: "nope", timeoutMs: 10)) } == "NOT_FOUND")
            #expect(await Self.code { try await client.send(WaitRenderRequest(renderId: "done", timeoutMs: -1)) } == "BAD_ARGUMENT")
            #expect(try await Self.credits(dispatcher, "u1") == (5, 1))
            await client.close()
        }
    }

    @Test func renderWaitLooksAgainWhenTheNotificationIsLost() async throws {
        try await TestDispatcher.run(renderRecheck: .milliseconds(300)) { dispatcher in
            let client = try await dispatcher.client()
            try await Self.grant(dispatcher, "u1", credits: 1)
            _ = try await client.send(Self.request("r1"))
            async let waited = client.send(WaitRenderRequest(renderId: "r1", timeoutMs: 120_000))
            try await dispatcher.waitUntilWaited(.render("r1"))
            // Ended as by a worker killed between its commit and its notification: no NOTIFY, so
            // only the recheck can end the wait before its timeout.
            try await dispatcher.queue.pool.query("UPDATE renders SET status = 'failed', error_code = 'RENDER_FAILED' WHERE id = 'r1'")
            let result = try await waited
            #expect(!result.timedOut && result.render.status == .failed)
            await client.close()
        }
    }

    @Test func thumbsDownRefundsOnceAndOnlyTheOwnersCompleteRenders() async throws {
        try await TestDispatcher.run { dispatcher in
            let client = try await dispatcher.client()
            try await Self.grant(dispatcher, "u1", credits: 2)
            let store = RenderStore(pool: dispatcher.queue.pool)
            _ = try await client.send(Self.request("r1"))
            let down = RenderFeedbackRequest(renderId: "r1", userId: "u1", vote: .down, category: "fit")
            #expect(await Self.code { try await client.send(down) } == "RENDER_NOT_COMPLETE")
            guard case .started = try await store.start(id: "r1") else { Issue.record("not started"); return }
            #expect(try await store.complete(id: "r1", resultPath: "u1/renders/r1.jpg"))
            #expect(try await Self.credits(dispatcher, "u1") == (2, 1))
            #expect(await Self.code { try await client.send(RenderFeedbackRequest(renderId: "r1", userId: "u2", vote: .down)) } == "NOT_FOUND")
            #expect(try await client.send(down) == .init(renderId: "r1", vote: .down, refunded: true))
            #expect(try await client.send(down) == .init(renderId: "r1", vote: .down, refunded: false))
            #expect(try await client.send(RenderFeedbackRequest(renderId: "r1", userId: "u1", vote: .up)).refunded == false)
            #expect(try await Self.credits(dispatcher, "u1") == (2, 0))
            #expect(try await client.send(RenderStatusRequest(renderId: "r1")).feedback == "up")
            let tooLong = RenderFeedbackRequest(renderId: "r1", userId: "u1", vote: .down, category: String(repeating: "x", count: 65))
            #expect(await Self.code { try await client.send(tooLong) } == "BAD_ARGUMENT")
            await client.close()
        }
    }

    @Test func rendersListIsTheUsersNewestFirst() async throws {
        try await TestDispatcher.run { dispatcher in
            let client = try await dispatcher.client()
            try await Self.grant(dispatcher, "u1", credits: 5)
            try await Self.grant(dispatcher, "u2", credits: 5)
            for id in ["a", "b", "c"] { _ = try await client.send(Self.request(id)) }
            _ = try await client.send(Self.request("other", user: "u2"))
            #expect(try await client.send(ListRendersRequest(userId: "u1")).renders.map(\.id) == ["c", "b", "a"])
            #expect(try await client.send(ListRendersRequest(userId: "u1", limit: 2)).renders.map(\.id) == ["c", "b"])
            #expect(try await client.send(ListRendersRequest(userId: "u3")).renders.isEmpty)
            #expect(await Self.code { try await client.send(ListRendersRequest(userId: "u1", limit: 0)) } == "BAD_ARGUMENT")
            await client.close()
        }
    }

    @Test func anOnboardingTokenBuysOneFreeRenderAndLinksOnce() async throws {
        try await TestDispatcher.run(renderSettings: RenderRequestSettings(freeCredits: 4)) { dispatcher in
            let client = try await dispatcher.client(.tcp)
            let issued = try await client.send(IssueTokenRequest())
            #expect(issued.token.hasPrefix("eph_") && issued.tokenId == EphemeralTokens.tokenID(of: issued.token))
            #expect(issued.expiresAt.timeIntervalSinceNow > 86_000)
            // Only the hash is stored.
            let stored = try await dispatcher.queue.pool.query("""
                SELECT count(*) FILTER (WHERE row_to_json(t)::text LIKE '%' || $1 || '%') AS plain, count(*) AS n FROM ephemeral_tokens t
                """, [String(issued.token.dropFirst(4))]).rows[0]
            #expect(try stored.int("n") == 1 && stored.int("plain") == 0)

            func tokenRender(_ id: String, token: String = issued.token, owner: String? = nil) -> RequestRenderRequest {
                RequestRenderRequest(renderId: id, ephemeralToken: token, ownerId: owner, garmentId: "g1", bodyPhotoId: "b1", category: "tops")
            }
            #expect(await Self.code { try await client.send(tokenRender("t0", owner: "u1")) } == "BAD_ARGUMENT")
            #expect(await Self.code { try await client.send(tokenRender("t0", token: "eph_unknown")) } == "INVALID_TOKEN")
            let render = try await client.send(tokenRender("t1"))
            #expect(render.userId == nil && !render.charged && render.status == .pending)
            #expect(try await dispatcher.queue.pool.query("SELECT owner_id FROM renders WHERE id = 't1'").rows[0].string("owner_id") == issued.tokenId)
            #expect(await Self.code { try await client.send(tokenRender("t2")) } == "TOKEN_ALREADY_USED")

            let linked = try await client.send(LinkAccountRequest(ephemeralToken: issued.token, userId: "newuser"))
            #expect(linked == .init(userId: "newuser", renderId: "t1", creditsGranted: 4))
            #expect(try await Self.credits(dispatcher, "newuser") == (4, 0))
            #expect(try await client.send(ListRendersRequest(userId: "newuser")).renders.map(\.id) == ["t1"])
            // Once only; and a linked token authorises nothing more.
            #expect(await Self.code { try await client.send(LinkAccountRequest(ephemeralToken: issued.token, userId: "other")) } == "INVALID_TOKEN")
            #expect(await Self.code { try await client.send(tokenRender("t3")) } == "INVALID_TOKEN")
            // The app retrying its request after the link still gets its render.
            #expect(try await client.send(tokenRender("t1")).id == "t1")
            #expect(try await Self.credits(dispatcher, "newuser") == (4, 0))
            await client.close()
        }
    }

    /// A render id is the requester's own: asked by another user or token, the answer is a
    /// conflict that discloses nothing of the render, and nothing is charged.
    @Test func aRenderIdOfAnotherRequesterIsAConflictAndDisclosesNothing() async throws {
        try await TestDispatcher.run { dispatcher in
            let client = try await dispatcher.client(.tcp)
            try await Self.grant(dispatcher, "u1", credits: 1)
            try await Self.grant(dispatcher, "u2", credits: 1)
            _ = try await client.send(Self.request("secret-render", user: "u1"))
            let token = try await client.send(IssueTokenRequest()).token
            let byToken = RequestRenderRequest(renderId: "secret-render", ephemeralToken: token, garmentId: "g1", bodyPhotoId: "b1", category: "tops")
            for other in [Self.request("secret-render", user: "u2"), byToken] {
                do {
                    let leaked = try await client.send(other)
                    Issue.record("another requester got the render: \(leaked)")
                } catch let error as DispatcherError {
                    #expect(error.code == .renderIdConflict)
                    #expect(!error.message.contains("u1") && !error.message.contains("g1"), "\(error.message)")
                }
            }
            #expect(try await Self.credits(dispatcher, "u2") == (1, 0))
            let reserved = try await dispatcher.queue.pool.query("SELECT user_id FROM credit_reservations").rows.map { try $0.string("user_id") }
            #expect(reserved == ["u1"])
            // The owner still gets it back.
            #expect(try await client.send(Self.request("secret-render", user: "u1")).userId == "u1")
            await client.close()
        }
    }

    /// `credits.get` answers what render charging would do: the balance less what renders under
    /// way hold, and "subscribed" by the same rule (Apple's billing grace included), nulls explicit.
    @Test func aBalanceShowsGrantedConsumedReservedAndTheSubscriptionRenderChargingUses() async throws {
        try await TestDispatcher.run { dispatcher in
            let client = try await dispatcher.client(.tcp)
            func subscribe(_ user: String, _ status: String, expiresIn seconds: Double) async throws {
                try await dispatcher.queue.pool.query("""
                    INSERT INTO subscriptions (user_id, status, started_at, expires_at)
                    VALUES ($1, $2, now() - interval '30 days', now() + make_interval(secs => $3))
                    """, [user, status, seconds])
            }
            try await Self.grant(dispatcher, "u1", credits: 3)
            _ = try await client.send(Self.request("r1"))
            let store = RenderStore(pool: dispatcher.queue.pool)
            _ = try await client.send(Self.request("r2"))
            guard case .started = try await store.start(id: "r2") else { throw TestFailure("r2 not started") }
            #expect(try await store.complete(id: "r2", resultPath: "u1/renders/r2.jpg"))
            let balance = try await client.credits(userId: "u1")
            #expect(balance == CreditBalanceView(userId: "u1", granted: 3, consumed: 1, reserved: 1, available: 1, subscribed: false, subscription: nil))

            // Never seen: zeros, and the nulls are on the wire.
            let raw = try await dispatcher.withRawConnection(.unix) { raw in
                try await raw.greeting()
                try await raw.send(#"{"id":1,"op":"credits.get","args":{"userId":"nobody"}}"# + "\n")
                return try await raw.response()
            }
            #expect(raw["result"] == (try JSONValue(json: #"{"userId":"nobody","granted":0,"consumed":0,"reserved":0,"available":0,"subscribed":false,"subscription":null}"#)),
                    "\(raw.jsonText)")

            // Within Apple's billing grace a lapsed paid subscription still renders free; past it, or
            // cancelled and ended, it does not. Each answer agrees with the charge of a real request.
            let cases: [(user: String, status: String, expiresIn: Double, subscribed: Bool)] = [
                ("trial", "trial", 86_400, true), ("grace", "subscribed", -10 * 86_400, true),
                ("lapsed", "subscribed", -20 * 86_400, false), ("ended", "cancelled", -60, false),
            ]
            for entry in cases {
                try await subscribe(entry.user, entry.status, expiresIn: entry.expiresIn)
                try await Self.grant(dispatcher, entry.user, credits: 1)
                let answer = try await client.send(CreditsGetRequest(userId: entry.user))
                #expect(answer.subscribed == entry.subscribed && answer.subscription?.status == entry.status, "\(entry.user): \(answer)")
                #expect(abs((answer.subscription?.expiresAt?.timeIntervalSinceNow ?? .infinity) - entry.expiresIn) < 600, "\(entry.user): \(answer)")
                let render = try await client.send(Self.request("r-\(entry.user)", user: entry.user))
                #expect(render.charged == !entry.subscribed, "\(entry.user)")
            }
            #expect(await Self.code { try await client.send(CreditsGetRequest(userId: "../u1")) } == "BAD_ARGUMENT")
            await client.close()
        }
    }
}
