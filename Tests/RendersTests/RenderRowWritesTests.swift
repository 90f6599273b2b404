import FakeProviders
import FleetQueue
import FleetStorage
@testable import FleetTestSupport
import Foundation
@testable import Imaging
@testable import Renders
import Testing

/// What a render writes to its row, counted by a trigger the test adds to `renders`: each write
/// is a row version that every index and the WAL pay for (`docs/scaling.md`, "A render's
/// transactions"). The request inserts the row once, with its job's id; the run writes it three
/// times (the start, the submission with the garment sent, the completion). The completion or the
/// failure, its credit and its job's end are one transaction.
@Suite struct RenderRowWritesTests {
    /// `renders`' writes, in order, as `render_writes` rows (rolled back with their transaction).
    private func countWrites(_ f: RenderFixture) async throws {
        try await f.q.pool.query("CREATE TABLE render_writes (n bigserial, render_id text, op text)")
        try await f.q.pool.query("""
            CREATE FUNCTION note_render_write() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN INSERT INTO render_writes (render_id, op) VALUES (NEW.id, TG_OP); RETURN NEW; END $$
            """)
        try await f.q.pool.query(
            "CREATE TRIGGER note_render_write AFTER INSERT OR UPDATE ON renders FOR EACH ROW EXECUTE FUNCTION note_render_write()")
    }

    private func writes(_ f: RenderFixture, _ render: String) async throws -> [String] {
        try await f.q.pool.query("SELECT op FROM render_writes WHERE render_id = $1 ORDER BY n", [render]).rows.map { try $0.string("op") }
    }

    @Test func aRenderIsInsertedOnceWithItsJobAndWrittenThreeTimesByItsRun() async throws {
        // fal's jobs run on: the submission is kept on the row.
        let f = try await RenderFixture.atFal(latency: .milliseconds(200), credits: 1)
        try await countWrites(f)
        let render = try await f.request("r1")
        #expect(render.jobID != nil)
        #expect(try await writes(f, "r1") == ["INSERT"])
        #expect(try await f.run(render) == .completed(.object(["renderId": .string("r1"), "outcome": .string("complete")])))
        let done = try await f.reload(render)
        #expect(done.status == .complete && done.garmentCutout == true && done.providerJobID != nil)
        #expect(try await writes(f, "r1") == ["INSERT", "UPDATE", "UPDATE", "UPDATE"])
        #expect(try await f.credits("u1") == (1, 1, 0))
    }

    @Test func aStartRefusedForAPendingMakerIsRolledBackAndTheRenderStaysPending() async throws {
        let f = try await RenderFixture.make()
        try await f.grant("u1", credits: 1)
        try await countWrites(f)
        let render = try await f.request("r1")
        // A cut-out of g1 queued after the request committed (a `garment.process` sent beside it).
        let maker = try await f.q.queue.enqueue(try NewJob(GarmentCutoutPayload(userID: StorageID("u1"), garmentID: StorageID("g1"))))
        do {
            let end = try await f.run(render)
            Issue.record("the render ran while its garment's cut-out was queued: \(end)")
        } catch let deferral as JobDeferral {
            guard case .runAfter(let jobs, _) = deferral else { throw deferral }
            #expect(jobs == [maker.id])
        }
        #expect(try await f.reload(render).status == .pending)
        // The start's write went with its transaction.
        #expect(try await writes(f, "r1") == ["INSERT"])
    }

    /// The transaction ids (`xmin`) of what ended render `id`: its row, its job's, its user's
    /// credits row and its ledger entry `entry`.
    private func settlingTransactions(_ f: RenderFixture, _ id: String, entry: String) async throws -> [String: String?] {
        let row = try await f.q.pool.query("""
            SELECT r.xmin::text AS render, j.xmin::text AS job, c.xmin::text AS credits,
                   (SELECT l.xmin::text FROM credit_ledger AS l WHERE l.render_id = r.id AND l.entry = $2) AS ledger
            FROM renders AS r JOIN jobs AS j ON j.id = r.job_id LEFT JOIN credits AS c ON c.user_id = r.user_id
            WHERE r.id = $1
            """, [id, entry]).rows[0]
        return ["render": row["render"], "job": row["job"], "credits": row["credits"], "ledger": row["ledger"]]
    }

    /// A render worker (the real process) settles a render, its credit and its job in one
    /// transaction (`JobContext.end`): a completion consumes the credit and completes the job, a
    /// provider's refusal releases it and ends the job `dead`, each in the commit that ends the
    /// render, which also carries its announcement (no transaction of their own).
    @Test func theRenderItsCreditAndItsJobEndInOneTransaction() async throws {
        let f = try await RenderFixture.atFal(latency: .milliseconds(200), credits: 2)
        let fal = f.fal!
        defer { Task { await fal.stop() } }
        let worker = try WorkerProcess(databaseURL: f.q.url, executable: "render-worker", environment: f.workerEnvironment)
        defer { worker.signal(SIGKILL) }

        let complete = try await f.request("r1")
        let completeJob = try #require(complete.jobID)
        try await f.q.waitUntil("r1's job ended") { try await f.q.queue.job(id: completeJob)?.state.isTerminal == true }
        #expect(try await f.reload(complete).status == .complete)
        #expect(try await f.q.queue.job(id: completeJob)?.state == .completed)
        let completion = try await settlingTransactions(f, "r1", entry: "consume")
        #expect(Set(completion.values).count == 1 && completion["render"] != nil, "\(completion)")

        fal.update { $0.rejection = .init(field: "model_image", message: "person not detected") }
        let refused = try await f.request("r2")
        let refusedJob = try #require(refused.jobID)
        try await f.q.waitUntil("r2's job ended") { try await f.q.queue.job(id: refusedJob)?.state.isTerminal == true }
        let job = try #require(try await f.q.queue.job(id: refusedJob))
        #expect(job.state == .dead && job.errors.map(\.code) == ["PROVIDER_REJECTED"], "\(job)")
        #expect(try await f.reload(refused).failureCode == "PROVIDER_REJECTED")
        var failure = try await settlingTransactions(f, "r2", entry: "release")
        // A release moves no balance: the credits row is the completion's.
        failure["credits"] = nil
        #expect(Set(failure.values).count == 1 && failure["render"] != nil, "\(failure)")
        #expect(try await f.credits("u1") == (2, 1, 0))
        #expect(try await f.ledger("r1") == ["reserve", "consume"])
        #expect(try await f.ledger("r2") == ["reserve", "release"])
    }
}
