@testable import DispatcherProtocol
import FakeProviders
import FleetHTTPClient
import FleetStorage
import FleetSupport
@testable import FleetTestSupport
import Foundation
@testable import Imaging
@testable import Providers
@testable import Renders
import Testing

/// The whole render path with every piece real and separate: `render.request` over the
/// dispatcher's socket → a `render-worker` process submitting to fal's queue API (a fake on
/// loopback) → fal's signed webhook into the `dispatcher` process's HTTP listener → `render.wait`
/// answers `complete`, and the credit is consumed once, even when fal delivers again.
@Suite struct EndToEndRenderTests {
    @Test func aRenderRequestedOverTheSocketCompletesByTheSignedWebhook() async throws {
        let (q, root) = try await Self.falRenderOfU1()

        let fal = try await FakeFal.start(webhookClient: CurlHTTPClient())
        fal.update { $0.latency = .milliseconds(300) }
        let socket = temporaryPath("dispatcher") + ".sock"
        let httpPort = try freePort()
        let webhookURL = "http://127.0.0.1:\(httpPort)/webhooks/fal"
        let dispatcher = try WorkerProcess(databaseURL: q.url, executable: "dispatcher", environment: [
            "FLEET_DISPATCHER_TCP": "off", "FLEET_DISPATCHER_SOCKET": socket, "FLEET_HTTP_ADDRESS": "127.0.0.1:\(httpPort)",
            "FLEET_FAL_JWKS_URL": fal.jwksURL, "FLEET_STORAGE_ROOT": root,
        ])
        // The webhook is the only way this worker learns the outcome: polling would start only
        // after a grace longer than the render's whole deadline.
        let worker = try WorkerProcess(databaseURL: q.url, executable: "render-worker", environment: [
            "FAL_KEY": fal.key, "FAL_QUEUE_URL": fal.baseURL, "FLEET_RENDER_WEBHOOK_URL": webhookURL,
            "FLEET_RENDER_WEBHOOK_GRACE_MS": "60000", "FLEET_STORAGE_ROOT": root,
        ])
        defer {
            dispatcher.signal(SIGKILL)
            worker.signal(SIGKILL)
            try? FileManager.default.removeItem(atPath: root)
        }

        // As scripts do: `dispatcher ping --wait` returns once the socket answers.
        let ping = try await ChildProcess.run(builtExecutable("dispatcher"), ["ping", "--dispatcher", socket, "--wait", "60"])
        #expect(ping == 0, "dispatcher log: \(dispatcher.log)")
        let client = try await DispatcherClient.connect(to: .unix(path: socket))
        let requested = try await client.send(RequestRenderRequest(renderId: "r-e2e", userId: "u1", garmentId: "g1", bodyPhotoId: "b1", category: "tops"))
        #expect(requested.status == .pending && requested.charged && requested.provider == FashnProvider.name)
        let waited = try await client.send(WaitRenderRequest(renderId: "r-e2e", timeoutMs: 30_000))
        #expect(!waited.timedOut, "dispatcher log: \(dispatcher.log)\nworker log: \(worker.log)")
        #expect(waited.render.status == .complete && waited.render.resultPath == "u1/renders/r-e2e.jpg")
        #expect(FileManager.default.fileExists(atPath: "\(root)/u1/renders/r-e2e.jpg"))

        // One submit, one delivery accepted by the dispatcher, the outcome taken from it (no poll).
        let submits = fal.requests.filter { $0.method == "POST" }
        #expect(submits.count == 1)
        #expect(fal.deliveries.map(\.status) == [200] && fal.deliveries.map(\.url) == [webhookURL])
        #expect(!fal.requests.contains { $0.method == "GET" && $0.path.hasSuffix("/status") })
        let events = try await q.pool.query("SELECT request_id FROM provider_events WHERE provider = 'fal'").rows
        #expect(events.count == 1)

        // fal delivers again: acknowledged, applied once; the credit stays consumed once.
        let requestID = try events[0].string("request_id")
        #expect(await fal.postWebhook(requestID: requestID, to: webhookURL) == 200)
        let credits = try await q.pool.query("SELECT total_granted, total_consumed FROM credits WHERE user_id = 'u1'").rows[0]
        #expect(try [credits.int("total_granted"), credits.int("total_consumed")] == [2, 1])
        let ledger = try await q.pool.query("SELECT entry FROM credit_ledger WHERE render_id = 'r-e2e' ORDER BY id").rows.map { try $0.string("entry") }
        #expect(ledger == ["reserve", "consume"])
        #expect(try await q.pool.query("SELECT count(*) AS n FROM provider_events").rows[0].int("n") == 1)
        #expect(try await client.send(RenderStatusRequest(renderId: "r-e2e")).status == .complete)
        await client.close()

        dispatcher.signal(SIGTERM)
        worker.signal(SIGTERM)
        #expect(await dispatcher.wait() == 0)
        #expect(await worker.wait() == 0)
        await fal.stop()
    }

    /// A database with fal FASHN active and `u1` granted 2 credits, and storage (its root
    /// returned) holding `u1`'s body photo `b1` and garment cut-out `g1`: a render of them runs
    /// at fal by processes given that root.
    static func falRenderOfU1() async throws -> (TestQueue, root: String) {
        let q = try await TestQueue.make()
        let root = temporaryPath("images")
        let storage = FileImageStorage(root: root)
        let user = try StorageID("u1")
        try await storage.write(RenderFixture.bodyPhoto, to: .bodyPhoto(user: user, photo: StorageID("b1")))
        try await storage.write(try await LocalBackgroundRemover().cutout(of: plainBackgroundGarment), to: .garmentCutout(user: user, garment: StorageID("g1")))
        try await RenderSettings(provider: FashnProvider.name, enabledCategories: Set(GarmentCategory.allCases)).save(to: q.pool)
        try await q.pool.query("INSERT INTO credits (user_id, total_granted) VALUES ('u1', 2)")
        return (q, root)
    }
}
