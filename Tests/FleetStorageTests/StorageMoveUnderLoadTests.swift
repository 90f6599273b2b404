@testable import DispatcherProtocol
import FakeProviders
import FleetHTTPClient
import FleetObjectStore
import FleetStorage
import FleetSupport
@testable import FleetTestSupport
import Foundation
@testable import Providers
@testable import Renders
import Testing

/// The move of `docs/operations.md`, "Moving to object storage", with the fleet running: a
/// `dispatcher`, an `image-worker` and a `render-worker` process on the gateway's bucket with the
/// file tree they used before as `FLEET_STORAGE_FALLBACK`, and `dispatcher storage copy` moving
/// that tree into the bucket meanwhile. The copy is paused (SIGSTOP) early in the first user's
/// objects while renders are asked for whose photos and uploads are only in the tree, and while
/// that first user is purged; then it goes on. Counted: every render completes and its
/// result is read back from the bucket, nothing the fleet wrote reaches the tree, the purged user
/// has no object left in either store, everything else in the tree is in the bucket byte-equal,
/// and the copy's second run copies nothing.
@Suite struct StorageMoveUnderLoadTests {
    @Test func theFleetKeepsServingWhileItsTreeIsCopiedIntoTheBucketAndAPurgeLeavesNothing() async throws {
        let gateway = try await S3Gateway.connection()
        let prefix = "move/\(UUID().uuidString)"
        let bucket = S3ImageStorage(client: gateway.client(), prefix: prefix)
        let tree = FileImageStorage(root: temporaryPath("move-tree"))

        // The tree as the fleet left it: the purged user first in the copy's order, then six users
        // with images of every kind, and the photos and uploads their renders will read. The
        // purged user's objects all fit the copy's first listing page (1,000 keys), so what it
        // lists does not depend on when the purge comes.
        let purged = try StorageID("a-purged0")
        let purgedObjects = 900
        _ = try await StoreFixture.fill(tree, users: 1, objectsEach: purgedObjects, userPrefix: "a-purged")
        _ = try await StoreFixture.fill(tree, users: 6, objectsEach: 150, userPrefix: "m")
        let users = try (0..<6).map { try StorageID("m\($0)") }
        for user in users {
            try await tree.write(RenderFixture.bodyPhoto, to: .upload(user: user, upload: try StorageID("upB")))
            try await tree.write(RenderFixture.bodyPhoto, to: .bodyPhoto(user: user, photo: try StorageID("b-old")))
            try await tree.write(plainBackgroundGarment, to: .upload(user: user, upload: try StorageID("upG")))
        }

        let q = try await TestQueue.make()
        try await RenderSettings(provider: FashnProvider.name, enabledCategories: Set(GarmentCategory.allCases)).save(to: q.pool)
        for user in users { try await q.pool.query("INSERT INTO credits (user_id, total_granted) VALUES ('\(user)', 1)") }
        let fal = try await FakeFal.start(webhookClient: CurlHTTPClient())
        let store = gateway.environment(prefix: prefix).merging(["FLEET_STORAGE_FALLBACK": tree.root]) { $1 }
        let socket = temporaryPath("dispatcher") + ".sock"
        let dispatcher = try WorkerProcess(databaseURL: q.url, executable: "dispatcher", environment: store.merging([
            "FLEET_DISPATCHER_TCP": "off", "FLEET_DISPATCHER_SOCKET": socket, "FLEET_HTTP_ADDRESS": "127.0.0.1:\(try freePort())",
        ]) { $1 })
        let images = try WorkerProcess(
            databaseURL: q.url, executable: "image-worker", environment: store.merging(["FLEET_CUTOUT_BACKENDS": "local", "FLEET_LOG_LEVEL": "info"]) { $1 })
        let renders = try WorkerProcess(databaseURL: q.url, executable: "render-worker", environment: store.merging([
            "FAL_KEY": fal.key, "FAL_QUEUE_URL": fal.baseURL, "FLEET_RENDER_POLL_MS": "100",
        ]) { $1 })
        let processes = [dispatcher, images, renders]
        defer { for process in processes { process.signal(SIGKILL) } }
        let logs = { processes.map(\.log).joined(separator: "\n---\n") }
        #expect(try await ChildProcess.run(builtExecutable("dispatcher"), ["ping", "--dispatcher", socket, "--wait", "60"]) == 0, "\(logs())")

        let location = "s3://\(gateway.endpoint.bucket)/\(prefix)"
        let copyLog = temporaryPath("move-copy") + ".json"
        let copy = try ChildProcess(
            builtExecutable("dispatcher"), ["storage", "copy", "--from", tree.root, "--to", location, "--json", "--progress-seconds", "0", "--concurrency", "1"],
            environment: CopyRun.environment(gateway), outputPath: copyLog)
        defer { copy.signal(SIGKILL) }
        // Paused after its first 20 of the 900, one at a time: the test's look may come hundreds
        // of objects late (its process busy with other suites) and still find the copy in them.
        try await waitFor("the copy into the purged user's objects", timeout: .seconds(120)) {
            try await bucket.client.list(prefix: "\(prefix)/\(purged)/").keys.count >= 20
        }
        copy.signal(SIGSTOP)

        let client = try await DispatcherClient.connect(to: .unix(path: socket))
        for (index, user) in users.enumerated() {
            // Half from uploads (normalised and cut out first), half from a body photo stored before.
            let fromUpload = index % 2 == 0
            _ = try await client.send(RequestRenderRequest(
                renderId: "mv\(index)", userId: "\(user)", garmentId: "g-new", bodyPhotoId: fromUpload ? "b-new" : "b-old", category: "tops",
                bodyUploadId: fromUpload ? "upB" : nil, garmentUploadId: "upG"))
        }
        let purge = try await client.send(PurgeAccountRequest(userId: "\(purged)"))
        let purgeEnded = try await client.send(WaitRequest(jobId: purge.jobId, timeoutMs: 60_000)).job
        #expect(purgeEnded.state == .completed, "\(purgeEnded)\n\(logs())")
        copy.signal(SIGCONT)

        for index in users.indices {
            let waited = try await client.send(WaitRenderRequest(renderId: "mv\(index)", timeoutMs: 120_000))
            #expect(waited.render.status == .complete, "\(waited.render)\n\(logs())")
        }
        #expect(await copy.wait(timeout: .seconds(300)) == 0, "\((try? String(contentsOfFile: copyLog, encoding: .utf8)) ?? "")")
        let first = CopyRun(status: 0, json: (try? String(contentsOfFile: copyLog, encoding: .utf8)) ?? "")
        #expect(first.counts["failed"] == 0, "\(first.output)")
        #expect(first.counts["listed"] == purgedObjects + 6 * 153)
        #expect((first.counts["vanished"] ?? 0) > 0, "the purge ran while the copy was in the purged user's objects: \(first.output)")

        for (index, user) in users.enumerated() {
            let result = StorageKey.render(user: user, render: try StorageID("mv\(index)"))
            #expect(try await bucket.read(result, maxBytes: 20 << 20).starts(with: [0xFF, 0xD8, 0xFF]), "the render read back from the bucket")
            #expect(try await !tree.holds(result), "the fleet's writes go to the bucket only")
            #expect(try await !tree.holds(.garmentCutout(user: user, garment: try StorageID("g-new"))))
        }
        #expect(try await bucket.client.list(prefix: "\(prefix)/\(purged)/").keys.isEmpty, "nothing of the purged user in the bucket")
        #expect(try await StoreListing.paths(of: tree).filter { $0.hasPrefix("\(purged)/") }.isEmpty, "nor in the tree")

        let inBucket = try await ImageStorageContractTests.listAll(bucket)
        let md5s = Dictionary(uniqueKeysWithValues: inBucket.map { ($0.key, $0.md5) })
        let inTree = try await ImageStorageContractTests.listAll(tree)
        #expect(inTree.count == 6 * 153)
        for object in inTree {
            #expect(md5s[object.key] == StoredObject.md5(of: try await tree.read(object.key, maxBytes: 20 << 20)), "\(object.key.relativePath) copied byte-equal")
        }
        let second = try await CopyRun.run(["--from", tree.root, "--to", location], gateway: gateway)
        #expect(second.counts["copied"] == 0 && second.counts["failed"] == 0 && second.counts["skipped"] == 6 * 153, "\(second.output)")

        let credits = try await q.pool.query("SELECT sum(total_consumed)::int AS consumed FROM credits").rows[0]
        #expect(try credits.int("consumed") == 6, "each render paid once")
        await client.close()
        await fal.stop()
    }
}
