@testable import DispatcherCore
@testable import DispatcherProtocol
import FleetSupport
@testable import FleetTestSupport
import Foundation
import Testing

/// `render.request` while a kind the render runs is paused: `RENDER_BUSY` at once, with a
/// `retryAfterSeconds` and a message naming the paused kind; nothing reserved, nothing queued.
/// Over the dispatcher's socket, against a real PostgreSQL.
@Suite(.timeLimit(.minutes(2))) struct PausedAdmissionTests {
    /// The refusal `body` ends with, or nil when it succeeds.
    static func refusal(_ body: () async throws -> some Any) async -> DispatcherError? {
        do { _ = try await body(); return nil } catch let error as DispatcherError { return error } catch { return DispatcherError(.internal, "\(error)") }
    }

    @Test func aRenderOfAPausedKindIsRefusedAtOnceAndNothingIsReservedOrQueued() async throws {
        try await TestDispatcher.run { dispatcher in
            let client = try await dispatcher.client()
            let pool = dispatcher.queue.pool
            try await pool.query("INSERT INTO credits (user_id, total_granted) VALUES ('u1', 5)")
            func count(_ sql: String) async throws -> Int { try await pool.query(sql).rows[0].int("n") }
            func nothingWritten() async throws {
                #expect(try await count("SELECT count(*) AS n FROM renders") == 0)
                #expect(try await count("SELECT count(*) AS n FROM jobs") == 0)
                #expect(try await count("SELECT count(*) AS n FROM credit_reservations") == 0)
            }
            let plain = RequestRenderRequest(renderId: "r1", userId: "u1", garmentId: "g1", bodyPhotoId: "b1", category: "tops")

            _ = try await client.pause(kind: "render.run")
            let refused = try #require(await Self.refusal { try await client.send(plain) })
            #expect(refused.code == .renderBusy && refused.retryAfterSeconds == 30, "\(refused)")
            #expect(refused.message.contains("render.run is paused"), "\(refused.message)")
            try await nothingWritten()

            // An input kind the request needs: its uploads' normalisation and cut-out.
            _ = try await client.send(QueueResumeRequest(kind: "render.run"))
            _ = try await client.pause(kind: "garment.cutout")
            let withUploads = RequestRenderRequest(
                renderId: "r1", userId: "u1", garmentId: "g1", bodyPhotoId: "b1", category: "tops", bodyUploadId: "upB", garmentUploadId: "upG")
            let cutoutPaused = try #require(await Self.refusal { try await client.send(withUploads) })
            #expect(cutoutPaused.code == .renderBusy && cutoutPaused.message.contains("garment.cutout is paused"), "\(cutoutPaused)")
            try await nothingWritten()
            // The queue the render's jobs go to, paused whole.
            _ = try await client.send(QueueResumeRequest(kind: "garment.cutout"))
            _ = try await client.pause(queue: "default")
            let queuePaused = try #require(await Self.refusal { try await client.send(plain) })
            #expect(queuePaused.code == .renderBusy && queuePaused.message.contains("render.run is paused"), "\(queuePaused)")
            try await nothingWritten()

            // Resumed: accepted at once, reserved and queued.
            _ = try await client.send(QueueResumeRequest(queue: "default"))
            let render = try await client.send(withUploads)
            #expect(render.status == .pending && render.charged)
            #expect(try await count("SELECT count(*) AS n FROM credit_reservations") == 1)
            #expect(try await count("SELECT count(*) AS n FROM jobs WHERE kind = 'render.run'") == 1)
            await client.close()
        }
    }
}
