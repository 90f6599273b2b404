import FleetQueue
import FleetStorage
import Foundation
@testable import Imaging
@testable import Renders
import Testing

/// What a render writes to its row, counted by a trigger the test adds to `renders`: each write
/// is a row version that every index and the WAL pay for (`docs/scaling.md`, "A render's
/// transactions"). The request inserts the row once, with its job's id; the run writes it three
/// times (the start, the submission with the garment sent, the completion).
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
}
