@testable import DispatcherProtocol
import FakeProviders
import FleetHTTPClient
import FleetObjectStore
import FleetStorage
import FleetSupport
@testable import FleetTestSupport
import Foundation
@testable import Imaging
@testable import Providers
@testable import Renders
import Testing

/// The pipeline with its images on the real gateway and no shared disk: a `dispatcher`, an
/// `image-worker` and a `render-worker` process, each given `FLEET_STORAGE=s3://…` and the
/// gateway's keys in the AWS CLI's variables, fal a fake on loopback. The uploads are PUT into
/// the bucket by the test (as a backend would), normalised, cut out and rendered by the
/// processes, the result read back from the gateway, and `account.purge` leaves nothing under
/// the user's prefix (counted by listing). The same run on a shared folder of files, for the
/// growth counters: each worker's `/metrics` counts per kind exactly the objects and bytes the
/// listing finds, written and then deleted, and names neither the bucket nor the folder.
@Suite struct S3PipelineTests {
    @Test(arguments: StoreUnderTest.allCases)
    func uploadsAreNormalisedCutOutRenderedAndPurgedCountedPerKind(_ kind: StoreUnderTest) async throws {
        let (storage, store, secrets) = try await kind.makeShared()
        let q = try await TestQueue.make()
        try await RenderSettings(provider: FashnProvider.name, enabledCategories: Set(GarmentCategory.allCases)).save(to: q.pool)
        try await q.pool.query("INSERT INTO credits (user_id, total_granted) VALUES ('u1', 2)")
        let fal = try await FakeFal.start(webhookClient: CurlHTTPClient())

        let socket = temporaryPath("dispatcher") + ".sock"
        let dispatcher = try WorkerProcess(databaseURL: q.url, executable: "dispatcher", environment: store.merging([
            "FLEET_DISPATCHER_TCP": "off", "FLEET_DISPATCHER_SOCKET": socket, "FLEET_HTTP_ADDRESS": "127.0.0.1:\(try freePort())",
        ]) { $1 })
        let (imagesPort, rendersPort) = (try freePort(), try freePort())
        let images = try WorkerProcess(databaseURL: q.url, executable: "image-worker", environment: store.merging([
            "FLEET_CUTOUT_BACKENDS": "local", "FLEET_HTTP_ADDRESS": "127.0.0.1:\(imagesPort)",
        ]) { $1 })
        // No webhook: the worker polls fal for the outcome.
        let renders = try WorkerProcess(databaseURL: q.url, executable: "render-worker", environment: store.merging([
            "FAL_KEY": fal.key, "FAL_QUEUE_URL": fal.baseURL, "FLEET_RENDER_POLL_MS": "100", "FLEET_HTTP_ADDRESS": "127.0.0.1:\(rendersPort)",
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
        #expect(result.starts(with: [0xFF, 0xD8, 0xFF]), "the result read back from the store is a JPEG")
        let stored = try await storage.list(after: nil, limit: 1000)
        #expect(Set(stored.objects.map(\.key.relativePath)) == [
            "u1/uploads/upB", "u1/uploads/upG", "u1/body/b1.jpg", "u1/garments/g1.jpg", "u1/garments/g1_cutout.png",
            "u1/garments/g1_preview.jpg", "u1/renders/r-s3.jpg",
        ])
        let credits = try await q.pool.query("SELECT total_consumed FROM credits WHERE user_id = 'u1'").rows[0]
        #expect(try credits.int("total_consumed") == 1)
        #expect(fal.requests.filter { $0.method == "POST" }.count == 1)

        // Written: the image worker's photos, the render worker's result, each once, its bytes
        // what the listing finds; the uploads were the test's (a backend's), not a worker's.
        let listed = try await storage.tally()
        let written = try await Self.counters("written", at: imagesPort)
        #expect(written == Self.amounts(listed, [.body, .garment, .cutout, .preview]), "\(logs())")
        #expect(try await Self.counters("written", at: rendersPort) == Self.amounts(listed, [.render]))

        let purge = try await client.send(PurgeAccountRequest(userId: "u1"))
        let ended = try await client.send(WaitRequest(jobId: purge.jobId, timeoutMs: 60_000)).job
        #expect(ended.state == .completed, "\(ended)\n\(logs())")
        #expect(ended.result == .object(["filesDeleted": .number(7)]))
        #expect(try await storage.tally().byKind.isEmpty)
        // Deleted by the purge, in the image worker: every object of every kind, sizes included.
        #expect(try await Self.counters("deleted", at: imagesPort) == Self.amounts(listed, StorageKind.allCases))
        #expect(try await Self.counters("deleted", at: rendersPort) == [:])
        for port in [imagesPort, rendersPort] {
            let scrape = try await Self.metrics(at: port)
            for secret in secrets { #expect(!scrape.contains(secret), "no scrape names \(secret)") }
        }
        await client.close()
        await fal.stop()
    }

    static func metrics(at port: Int) async throws -> String {
        try await CurlHTTPClient().execute(HTTPClientRequest(url: "http://127.0.0.1:\(port)/metrics", timeout: .seconds(30))).text
    }

    /// `fleet_storage_<what>_objects_total` and `_bytes_total` per kind as a worker's `/metrics`
    /// shows them (kinds with none left out).
    static func counters(_ what: String, at port: Int) async throws -> [StorageKind: StorageTally.Amount] {
        let scrape = try await metrics(at: port)
        var amounts: [StorageKind: StorageTally.Amount] = [:]
        for kind in StorageKind.allCases {
            let objects = metricValue(scrape, "fleet_storage_\(what)_objects_total{kind=\"\(kind.rawValue)\"}")
            let bytes = metricValue(scrape, "fleet_storage_\(what)_bytes_total{kind=\"\(kind.rawValue)\"}")
            if objects != nil || bytes != nil { amounts[kind] = StorageTally.Amount(objects: Int(objects ?? -1), bytes: Int(bytes ?? -1)) }
        }
        return amounts
    }

    /// The listing's amounts of `kinds`, those it found.
    static func amounts(_ tally: StorageTally, _ kinds: [StorageKind]) -> [StorageKind: StorageTally.Amount] {
        tally.byKind.filter { kinds.contains($0.key) }
    }
}
