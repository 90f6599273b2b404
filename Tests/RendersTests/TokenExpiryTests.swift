import FleetHTTPClient
@testable import FleetQueue
import FleetStorage
@testable import DispatcherCore
@testable import FleetTestSupport
import Foundation
import Imaging
import Logging
@testable import Providers
import RenderLedger
@testable import Renders
import Testing

/// `tokens.expire` end to end: two dispatchers race for the slot, the winner deletes expired
/// tokens and their renders, and the image worker's purge deletes their files from a real tree.
@Suite struct TokenExpiryTests {
    let root = FileManager.default.temporaryDirectory.appendingPathComponent("images-\(UUID().uuidString.prefix(8))").path

    func token(_ q: TestQueue, _ id: String, expiresIn seconds: Int, linkedTo user: String? = nil) async throws {
        try await q.pool.query("""
            INSERT INTO ephemeral_tokens (id, token_hash, expires_at, linked_user_id, linked_at)
            VALUES ($1, decode(md5($1), 'hex'), now() + make_interval(secs => $2), $3, CASE WHEN $3::text IS NULL THEN NULL ELSE now() END)
            """, [id, seconds, user])
    }

    /// A render with its result file and the body photo it used, in `owner`'s tree.
    func render(_ q: TestQueue, _ id: String, token: String?, user: String?, owner: String,
                status: String = "complete", deadlineIn: Int = -60, charged: Bool = false) async throws {
        try await q.pool.query("""
            INSERT INTO renders (id, user_id, ephemeral_token_id, owner_id, garment_id, body_photo_id, category, provider, status, charged, deadline_at)
            VALUES ($1, $2, $3, $4, 'g-' || $1, 'b-' || $1, 'tops', 'local', $5::render_status, $6, now() + make_interval(secs => $7))
            """, [id, user, token, owner, status, charged, deadlineIn])
        try AtomicFile.write(Data("render".utf8), to: "\(root)/\(owner)/renders/\(id).jpg")
        try AtomicFile.write(Data("body".utf8), to: "\(root)/\(owner)/body/b-\(id).jpg")
    }

    func exists(_ path: String) -> Bool { FileManager.default.fileExists(atPath: "\(root)/\(path)") }

    func ids(_ q: TestQueue, _ sql: String) async throws -> Set<String> {
        Set(try await q.pool.query(sql).rows.map { try $0.string("id") })
    }

    @Test func expiredTokensTheirRendersAndFilesGoLiveOnesStay() async throws {
        let q = try await TestQueue.make()
        // Expired, never linked: a finished onboarding render in its own tree.
        try await token(q, "eph-old", expiresIn: -3600)
        try await render(q, "r-old", token: "eph-old", user: nil, owner: "anon-old")
        // Expired, its render left open past its deadline (its worker died) holding a credit
        // reservation: the reservation is released once, nothing consumed.
        try await token(q, "eph-open", expiresIn: -10)
        try await render(q, "r-open", token: "eph-open", user: nil, owner: "anon-open", status: "processing", charged: true)
        try await q.pool.query("""
            INSERT INTO credits (user_id, total_granted, total_consumed) VALUES ('payer', 3, 1);
            INSERT INTO credit_reservations (render_id, user_id) VALUES ('r-open', 'payer');
            INSERT INTO credit_ledger (key, user_id, render_id, entry, amount) VALUES ('reserve:r-open', 'payer', 'r-open', 'reserve', 1);
            """)
        // Expired, but its render is still running before its deadline: left for a later pass.
        try await token(q, "eph-running", expiresIn: -5)
        try await render(q, "r-running", token: "eph-running", user: nil, owner: "anon-running", status: "processing", deadlineIn: 20)
        // Expired, its render written into a real user's tree: the render goes, the tree stays.
        try await token(q, "eph-stray", expiresIn: -3600)
        try await render(q, "r-stray", token: "eph-stray", user: nil, owner: "u-real")
        // Kept: a live token, a linked (expired) token whose render moved to its user, a real user.
        try await token(q, "eph-live", expiresIn: 3600)
        try await render(q, "r-live", token: "eph-live", user: nil, owner: "anon-live")
        try await token(q, "eph-linked", expiresIn: -3600, linkedTo: "u-linked")
        try await render(q, "r-linked", token: nil, user: "u-linked", owner: "anon-linked")
        try await render(q, "r-real", token: nil, user: "u-real", owner: "u-real")
        try AtomicFile.write(Data("garment".utf8), to: "\(root)/u-real/garments/g1.jpg")
        // Expired with no render: the onboarding upload in the token's own tree goes too.
        try await token(q, "eph-upload", expiresIn: -3600)
        try AtomicFile.write(Data("upload".utf8), to: "\(root)/eph-upload/uploads/u1")

        // Two dispatchers race for one tokens.expire slot; one runs it.
        let expire = ScheduleEntry(expression: try CronExpression("* * * * * *"), target: .task(TokenExpirer.task))
        let tasks = MaintenanceTasks(pool: q.pool, providers: ProviderCatalog(settings: try ProviderSettings.load(from: [:]), http: CurlHTTPClient()), logger: testLogger)
        let dispatchers = ["a", "b"].map {
            Scheduler(settings: ScheduleSettings(entries: [expire]), slots: ScheduleSlots(pool: q.pool), owner: $0,
                      perform: { try await tasks.run($0) }, logger: testLogger)
        }
        let now = Date()
        async let first = dispatchers[0].fire(expire, after: now.addingTimeInterval(-1), now: now)
        async let second = dispatchers[1].fire(expire, after: now.addingTimeInterval(-1), now: now)
        let outcomes = [await first, await second]
        #expect(outcomes.filter { if case .fired = $0 { true } else { false } }.count == 1)
        #expect(outcomes.filter { if case .taken = $0 { true } else { false } }.count == 1)

        #expect(try await ids(q, "SELECT id FROM ephemeral_tokens") == ["eph-running", "eph-live", "eph-linked"])
        #expect(try await ids(q, "SELECT id FROM renders") == ["r-running", "r-live", "r-linked", "r-real"])
        #expect(try await ids(q, "SELECT render_id AS id FROM credit_reservations").isEmpty)
        #expect(try await ids(q, "SELECT key AS id FROM credit_ledger") == ["reserve:r-open", "release:r-open"])
        let credits = try await q.pool.query("SELECT total_granted, total_consumed FROM credits WHERE user_id = 'payer'").rows[0]
        #expect(try [credits.int("total_granted"), credits.int("total_consumed")] == [3, 1])

        // One purge per tree the expired tokens alone owned, never the real user's.
        let purges = try await q.pool.query("SELECT payload->>'userId' AS id FROM jobs WHERE kind = 'account.purge'").rows
        // (Token trees are named by the token's id: `EphemeralTokens.tokenID(of:)`.)
        #expect(try Set(purges.map { try $0.string("id") }) == ["anon-old", "anon-open", "eph-old", "eph-open", "eph-stray", "eph-upload"])
        // The image worker runs them.
        let claimed = try await q.driver.jobClaim(ClaimRequest(owner: "test-image-worker", lease: .seconds(30), slots: [.accountPurge: 10])).jobs
        #expect(claimed.count == 6)
        let purge = PurgeHandler(storage: FileImageStorage(root: root), accounts: AccountErasure(pool: q.pool))
        let context = JobContext(logger: testLogger, workerID: "test-image-worker", queue: q.queue)
        for job in claimed { _ = try await purge.run(job, context: context) }

        for gone in ["anon-old", "anon-open", "eph-upload"] { #expect(!exists(gone), "\(gone)") }
        for kept in ["anon-running/renders/r-running.jpg", "anon-live/renders/r-live.jpg", "anon-linked/renders/r-linked.jpg",
                     "u-real/renders/r-real.jpg", "u-real/garments/g1.jpg", "u-real/renders/r-stray.jpg"] {
            #expect(exists(kept), "\(kept)")
        }

        // Again, once the running render timed out: it goes too, and nothing is settled twice.
        try await q.pool.query("UPDATE renders SET deadline_at = now() - interval '1 second' WHERE id = 'r-running'")
        #expect(try await TokenExpirer(pool: q.pool, logger: testLogger).runOnce() == 1)
        #expect(try await TokenExpirer(pool: q.pool, logger: testLogger).runOnce() == 0)
        #expect(try await ids(q, "SELECT id FROM ephemeral_tokens") == ["eph-live", "eph-linked"])
        #expect(try await ids(q, "SELECT key AS id FROM credit_ledger") == ["reserve:r-open", "release:r-open"])
        #expect(try await q.pool.query("SELECT count(*) AS n FROM jobs WHERE kind = 'account.purge'").rows[0].int("n") == 8)
        try? FileManager.default.removeItem(atPath: root)
    }
}
