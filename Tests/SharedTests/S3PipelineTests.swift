@testable import DispatcherProtocol
import FakeProviders
import FleetHTTPClient
import FleetObjectStore
import FleetStorage
import FleetSupport
import Foundation
@testable import Imaging
@testable import Renders
import Testing

/// The pipeline with its images on the real gateway and no shared disk: a `dispatcher`, an
/// `image-worker` and a `render-worker` process, each given `FLEET_STORAGE=s3://…` and the
/// gateway's keys in the AWS CLI's variables, fal a fake on loopback. The uploads are PUT into
/// the bucket by the test (as a backend would), normalised, cut out and rendered by the
/// processes, the result read back from the gateway, and `account.purge` leaves nothing under
/// the user's prefix (counted by listing).
@Suite struct S3PipelineTests {
    @Test func uploadsInTheBucketAreNormalisedCutOutRenderedAndPurged() async throws {
        let gateway = try await S3Gateway.connection()
        let prefix = "pipeline/\(UUID().uuidString)"
        let storage = S3ImageStorage(client: gateway.client(), prefix: prefix)
        let q = try await TestQueue.make()
        try await RenderSettings(provider: FashnProvider.name, enabledCategories: Set(GarmentCategory.allCases)).save(to: q.pool)
        try await q.pool.query("INSERT INTO credits (user_id, total_granted) VALUES ('u1', 2)")
        let fal = try await FakeFal.start(webhookClient: CurlHTTPClient())

        let store = gateway.environment(prefix: prefix)
        let socket = temporaryPath("dispatcher") + ".sock"
        let dispatcher = try WorkerProcess(databaseURL: q.url, executable: "dispatcher", environment: store.merging([
            "FLEET_DISPATCHER_TCP": "off", "FLEET_DISPATCHER_SOCKET": socket, "FLEET_HTTP_ADDRESS": "127.0.0.1:\(try freePort())",
        ]) { $1 })
        let images = try WorkerProcess(databaseURL: q.url, executable: "image-worker", environment: store.merging(["FLEET_CUTOUT_BACKENDS": "local"]) { $1 })
        // No webhook: the worker polls fal for the outcome.
        let renders = try WorkerProcess(databaseURL: q.url, executable: "render-worker", environment: store.merging([
            "FAL_KEY": fal.key, "FAL_QUEUE_URL": fal.baseURL, "FLEET_RENDER_POLL_MS": "100",
        ]) { $1 })
        let processes = [dispatcher, images, renders]
        defer { for process in processes { process.signal(SIGKILL) } }
        let logs = { processes.map(\.log).joined(separator: "\n---\n") }

        let user = try StorageID("u1")
        try await storage.write(RenderFixture.bodyPhoto, to: .upload(user: user, upload: try StorageID("upB")))
        try await storage.write(plainBackgroundGarment, to: .upload(user: user, upload: try StorageID("upG")))

        #expect(try await ChildProcess.run(builtExecutable("dispatcher"), ["ping", "--dispatcher", socket, "--wait", "60"]) == 0, "\(logs())")
        let client = try await DispatcherClient.connect(to: .unix(path: socket))
        _ = try await client.send(RequestRenderRequest(
            renderId: "r-s3", userId: "u1", garmentId: "g1", bodyPhotoId: "b1", category: "tops", bodyUploadId: "upB", garmentUploadId: "upG"))
        let waited = try await client.send(WaitRenderRequest(renderId: "r-s3", timeoutMs: 90_000))
        #expect(waited.render.status == .complete, "\(waited.render)\n\(logs())")
        #expect(waited.render.resultPath == "u1/renders/r-s3.jpg")

        let result = try await storage.read(.render(user: user, render: try StorageID("r-s3")), maxBytes: 20 << 20)
        #expect(result.starts(with: [0xFF, 0xD8, 0xFF]), "the result read back from the gateway is a JPEG")
        let stored = try await gateway.client().list(prefix: "\(prefix)/u1/").keys.map { String($0.dropFirst(prefix.count + 1)) }
        #expect(Set(stored) == [
            "u1/uploads/upB", "u1/uploads/upG", "u1/body/b1.jpg", "u1/garments/g1.jpg", "u1/garments/g1_cutout.png",
            "u1/garments/g1_preview.jpg", "u1/renders/r-s3.jpg",
        ])
        let credits = try await q.pool.query("SELECT total_consumed FROM credits WHERE user_id = 'u1'").rows[0]
        #expect(try credits.int("total_consumed") == 1)
        #expect(fal.requests.filter { $0.method == "POST" }.count == 1)

        let purge = try await client.send(PurgeAccountRequest(userId: "u1"))
        let ended = try await client.send(WaitRequest(jobId: purge.jobId, timeoutMs: 60_000)).job
        #expect(ended.state == .completed, "\(ended)\n\(logs())")
        #expect(ended.result == .object(["filesDeleted": .number(7)]))
        #expect(try await gateway.client().list(prefix: "\(prefix)/u1/").keys.isEmpty)
        await client.close()
        await fal.stop()
    }
}
