import FakeProviders
import FleetHTTPClient
import FleetObjectStore
@testable import FleetQueue
import FleetStorage
@testable import FleetTestSupport
import Foundation
@testable import Imaging
import Logging
import Testing

/// What each image job asks of the store, counted on the wire: a real `image-worker` keeps its
/// images in the gateway's bucket through `S3FaultProxy`, which records every request by kind and
/// key. A normalise is 1 GET (its upload, the size limit checked on the GET's Content-Length
/// before any byte of the body) and 1 PUT (the photo); a cut-out is 1 GET (the garment photo) and
/// 2 PUTs (the cut-out and its preview); nothing is listed, nothing asked twice
/// (`docs/images.md`, "Requests per job"). The worker's own store check (a probe PUT and DELETE
/// at start and every 15 s) is told apart by its key and left out.
@Suite struct S3RequestsPerJobTests {
    @Test func aNormaliseIsOneGetAndOnePutACutoutOneGetAndTwoPuts() async throws {
        let bucket = try await CountedBucket.make()
        let (gateway, proxy, prefix, storage) = (bucket.gateway, bucket.proxy, bucket.prefix, bucket.storage)
        defer { Task { await proxy.stop() } }
        let user = try StorageID("u1")
        let photos = 3
        for n in 1...photos {
            try await storage.write(RenderFixture.bodyPhoto, to: .upload(user: user, upload: try StorageID("body\(n)")))
            try await storage.write(plainBackgroundGarment, to: .upload(user: user, upload: try StorageID("garment\(n)")))
        }

        let q = try await TestQueue.make()
        var environment = gateway.environment(prefix: prefix, through: proxy)
        environment["FLEET_CUTOUT_BACKENDS"] = "local"
        let worker = try WorkerProcess(databaseURL: q.url, executable: "image-worker", environment: environment)
        defer { worker.signal(SIGKILL) }
        let key = { (path: String) in "\(prefix)/u1/\(path)" }
        /// What the jobs asked of the store since the last call, the worker's probes left out.
        let jobRequests = { proxy.takeRequests().filter { !$0.key.contains(".fleet-probe/") } }

        var normalises: [Int64] = []
        for n in 1...photos {
            for (target, upload) in [(ImageTarget.body, "body\(n)"), (.garment, "garment\(n)")] {
                normalises.append(try await q.queue.enqueue(try NewJob(NormalizeImagePayload(
                    userID: user, uploadID: try StorageID(upload), target: target, imageID: try StorageID("\(upload)-photo")))).id)
            }
        }
        try await q.waitUntil(timeout: .seconds(120), "the photos normalised") { try await Self.completed(normalises, in: q) }
        let normalised = jobRequests()
        #expect(normalised.countsByKind() == [.getObject: 2 * photos, .putObject: 2 * photos], "\(normalised)\n\(worker.log)")
        #expect(Set(normalised.filter { $0.kind == .getObject }.map(\.key))
            == Set((1...photos).flatMap { [key("uploads/body\($0)"), key("uploads/garment\($0)")] }))
        #expect(Set(normalised.filter { $0.kind == .putObject }.map(\.key))
            == Set((1...photos).flatMap { [key("body/body\($0)-photo.jpg"), key("garments/garment\($0)-photo.jpg")] }))

        var cutouts: [Int64] = []
        for n in 1...photos {
            cutouts.append(try await q.queue.enqueue(try NewJob(GarmentCutoutPayload(userID: user, garmentID: try StorageID("garment\(n)-photo")))).id)
        }
        try await q.waitUntil(timeout: .seconds(120), "the garments cut out") { try await Self.completed(cutouts, in: q) }
        let cutOut = jobRequests()
        #expect(cutOut.countsByKind() == [.getObject: photos, .putObject: 2 * photos], "\(cutOut)\n\(worker.log)")
        #expect(Set(cutOut.filter { $0.kind == .getObject }.map(\.key)) == Set((1...photos).map { key("garments/garment\($0)-photo.jpg") }))
        #expect(Set(cutOut.filter { $0.kind == .putObject }.map(\.key))
            == Set((1...photos).flatMap { [key("garments/garment\($0)-photo_cutout.png"), key("garments/garment\($0)-photo_preview.jpg")] }))
    }

    /// A render of a processed garment asks the store for its two photos (the body photo and the
    /// cut-out) in one round of GETs, no HEAD before them (the look is the read), and writes its
    /// result in one conditional PUT: 2 GETs and 1 PUT per render.
    @Test func aRenderIsTwoGetsAndOnePut() async throws {
        let bucket = try await CountedBucket.make()
        let (gateway, proxy, prefix, storage) = (bucket.gateway, bucket.proxy, bucket.prefix, bucket.storage)
        defer { Task { await proxy.stop() } }
        let user = try StorageID("u1")
        try await storage.write(RenderFixture.bodyPhoto, to: .bodyPhoto(user: user, photo: StorageID("b1")))
        try await storage.write(try await LocalBackgroundRemover().cutout(of: plainBackgroundGarment), to: .garmentCutout(user: user, garment: StorageID("g1")))
        let renders = 3
        let f = try await RenderFixture.atFal(latency: .zero, credits: renders)
        defer { Task { await f.fal?.stop() } }

        var environment = gateway.environment(prefix: prefix, through: proxy)
        for name in ["FAL_KEY", "FAL_QUEUE_URL", "FLEET_RENDER_WEBHOOK_GRACE_MS", "FLEET_RENDER_POLL_MS"] { environment[name] = f.workerEnvironment[name] }
        let worker = try WorkerProcess(databaseURL: f.q.url, executable: "render-worker", environment: environment)
        defer { worker.signal(SIGKILL) }
        let ids = (1...renders).map { "r\($0)" }
        for id in ids { _ = try await f.request(id) }
        try await f.q.waitUntil(timeout: .seconds(120), "the renders complete") {
            for id in ids {
                let render = try #require(try await f.store.render(id: try StorageID(id)))
                if render.status == .failed { throw TestFailure("render \(id) failed: \(render)\n\(worker.log)") }
                if render.status != .complete { return false }
            }
            return true
        }
        let asked = proxy.takeRequests().filter { !$0.key.contains(".fleet-probe/") }
        #expect(asked.countsByKind() == [.getObject: 2 * renders, .putObject: renders], "\(asked)\n\(worker.log)")
        #expect(Set(asked.filter { $0.kind == .getObject }.map(\.key)) == ["\(prefix)/u1/body/b1.jpg", "\(prefix)/u1/garments/g1_cutout.png"])
        #expect(Set(asked.filter { $0.kind == .putObject }.map(\.key)) == Set(ids.map { "\(prefix)/u1/renders/\($0).jpg" }))
    }

    /// An upload over the limit costs the GET whose Content-Length refuses it (the body not read)
    /// and a HEAD to say its size in the error; nothing is written.
    @Test func anUploadOverTheLimitIsRefusedWithoutAWrite() async throws {
        let gateway = try await S3Gateway.connection()
        let proxy = try await S3FaultProxy.start(before: gateway.endpoint)
        defer { Task { await proxy.stop() } }
        let prefix = "requests/\(UUID().uuidString)"
        let user = try StorageID("u1")
        try await S3ImageStorage(client: gateway.client(), prefix: prefix)
            .write(RenderFixture.bodyPhoto, to: .upload(user: user, upload: try StorageID("big")))
        let storage = S3ImageStorage(client: S3Client(endpoint: proxy.endpoint, credentials: gateway.credentials, http: CurlHTTPClient()), prefix: prefix)
        let limit = RenderFixture.bodyPhoto.count - 1
        let handler = NormalizeHandler(storage: storage, normalizer: ImageNormalizer(limits: ImageLimits(maxBytes: limit)), profiles: NormalizeProfiles.builtIn)
        let job = ClaimedJob(id: 1, kind: .imageNormalize, queue: "default", priority: 2, attempt: 1, maxAttempts: 5,
                             payload: #"{"userId":"u1","uploadId":"big","target":"body","imageId":"b1"}"#, createdAt: Date())
        let context = JobContext(logger: Logger(label: "test"), workerID: "test", queue: try await TestQueue.make().queue)
        await #expect {
            _ = try await handler.run(job, context: context)
        } throws: { error in
            guard case JobError.permanent(let code, let message) = error else { return false }
            return code == .imageTooLarge && message.contains("\(RenderFixture.bodyPhoto.count) bytes")
        }
        #expect(proxy.requests.countsByKind() == [.getObject: 1, .headObject: 1], "\(proxy.requests)")
    }

    /// Whether every job of `ids` completed; a job that failed fails the wait at once.
    static func completed(_ ids: [Int64], in q: TestQueue) async throws -> Bool {
        var done = 0
        for id in ids {
            let job = try #require(try await q.queue.job(id: id))
            if job.state == .dead { throw TestFailure("job \(id) failed: \(job)") }
            if job.state == .completed { done += 1 }
        }
        return done == ids.count
    }
}

/// The gateway behind a proxy that records every request, and a store writing straight to the
/// gateway under a prefix of the test's own (what the test puts there is not counted).
struct CountedBucket {
    let gateway: S3Gateway.Connection
    let proxy: S3FaultProxy
    let prefix: String
    let storage: S3ImageStorage

    static func make() async throws -> Self {
        let gateway = try await S3Gateway.connection()
        let prefix = "requests/\(UUID().uuidString)"
        return Self(gateway: gateway, proxy: try await S3FaultProxy.start(before: gateway.endpoint), prefix: prefix,
                    storage: S3ImageStorage(client: gateway.client(), prefix: prefix))
    }
}
