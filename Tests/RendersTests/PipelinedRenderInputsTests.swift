@testable import DispatcherProtocol
import FleetQueue
@testable import FleetTestSupport
import Foundation
import Testing

/// A backend that sends the body photo's `image.normalize`, `garment.process` and a
/// `render.request` naming both photos by id without awaiting any answer (a `Promise.all`): the
/// dispatcher runs pipelined requests concurrently, so they commit in any order, and the render's
/// request may commit before the jobs making its photos exist. Whatever the order, the render
/// waits for them when its job is about to start it (`RenderInputCheck`): it sends the garment's
/// cut-out, at its first attempt, charged once. Real dispatcher, image worker and render worker
/// processes (`EarlyRenderTests.Fleet`), the fake rembg and the fake fal.
@Suite(.serialized) struct PipelinedRenderInputsTests {
    static let runs = 20

    @Test func threeRequestsPipelinedOnOneConnectionRenderTheCutoutAtTheFirstAttempt() async throws {
        try await sendRuns { fleet in (fleet.client, fleet.client) }
    }

    /// The photos from one backend, the render from another: nothing orders their commits.
    @Test func photosAndRenderSentFromTwoConnectionsRenderTheCutoutAtTheFirstAttempt() async throws {
        try await sendRuns { fleet in (fleet.client, try await DispatcherClient.connect(to: .unix(path: fleet.socket))) }
    }

    /// Runs `runs` renders one after another, each of its three requests sent at once (the photos'
    /// through the first client, the render's through the second), and checks every render.
    private func sendRuns(_ clients: (EarlyRenderTests.Fleet) async throws -> (photos: DispatcherClient, render: DispatcherClient)) async throws {
        let fleet = try await EarlyRenderTests.Fleet.start(cutout: [])
        try await fleet.q.pool.query("UPDATE credits SET total_granted = $1 WHERE user_id = 'u1'", [Self.runs])
        let (photos, renderClient) = try await clients(fleet)
        var wrong: [String] = []
        for run in 0..<Self.runs {
            async let body = photos.send(NormalizeImageRequest(userId: "u1", uploadId: "upB", target: .body, imageId: "b\(run)"))
            async let garment = photos.send(ProcessGarmentRequest(userId: "u1", uploadId: "upG", garmentId: "g\(run)"))
            async let requested = renderClient.send(RequestRenderRequest(
                renderId: "r\(run)", userId: "u1", garmentId: "g\(run)", bodyPhotoId: "b\(run)", category: "tops"))
            _ = try await (body, garment, requested)
            let waited = try await fleet.client.send(WaitRenderRequest(renderId: "r\(run)", timeoutMs: 45_000))
            let render = waited.render
            // Its job's outcome is recorded just after the render's.
            let jobID = try #require(render.jobId)
            try await fleet.q.waitUntil("r\(run)'s job ended") { try await fleet.job(jobID).state.isTerminal }
            let job = try await fleet.job(jobID)
            if render.status != .complete || render.garmentCutout != true || job.attempt != 1 || job.state != .completed {
                wrong.append("r\(run): \(render.status.rawValue), garmentCutout \(render.garmentCutout.map(String.init) ?? "nil"), "
                    + "job \(job.state.rawValue) at attempt \(job.attempt), errors \(job.errors.map { $0.code ?? $0.error })")
            }
        }
        #expect(wrong.isEmpty, "\(wrong.count) of \(Self.runs) renders not the awaited one: \(wrong.joined(separator: "; "))\n\(fleet.logs)")

        // What reached fal: one submit per render, each with a garment's cut-out, byte for byte.
        let cutouts = Set(try (0..<Self.runs).map { try Data(contentsOf: URL(fileURLWithPath: "\(fleet.root)/u1/garments/g\($0)_cutout.png")) })
        #expect(fleet.submits.count == Self.runs)
        for submit in fleet.submits {
            let sent = try EarlyRenderTests.garmentImage(of: submit)
            #expect(sent.mimeType == "image/png" && cutouts.contains(sent.bytes))
        }
        // One credit each, reserved and consumed once.
        let consumed = try await fleet.q.pool.query("SELECT total_consumed FROM credits WHERE user_id = 'u1'").rows[0].int("total_consumed")
        #expect(consumed == Self.runs)
        let entries = try await fleet.q.pool.query(
            "SELECT render_id, string_agg(entry, ',' ORDER BY id) AS entries FROM credit_ledger GROUP BY render_id").rows
        #expect(entries.count == Self.runs)
        for row in entries { #expect(try row.string("entries") == "reserve,consume") }
        if renderClient !== photos { await renderClient.close() }
        await fleet.stop()
    }
}
