import FakeProviders
import FleetHTTPClient
import FleetObjectStore
import FleetQueue
import FleetStorage
import FleetSupport
@testable import FleetTestSupport
import Foundation
@testable import Imaging
@testable import Renders
import Testing

/// The S3 store when the gateway misbehaves: its own errors (503 `SlowDown`, 500) answered by a
/// proxy in front of the real gateway and tried again within the policy's budget, wrong keys and
/// a missing bucket refused as `STORAGE_DENIED` (and the start-up check naming the variable),
/// a store that does not answer `STORAGE_UNAVAILABLE`, and a purge cut off half way finished by
/// the next.
@Suite struct S3StoreFaultTests {
    static let quickRetries = S3RetryPolicy(base: .milliseconds(20), cap: .milliseconds(200), budget: .seconds(10), requestTimeout: .seconds(10))

    @Test func slowDownAndInternalErrorsAreTriedAgainUntilTheGatewayTakesTheWrite() async throws {
        let gateway = try await S3Gateway.connection()
        let proxy = try await S3FaultProxy.start(before: gateway.endpoint)
        defer { Task { await proxy.stop() } }
        let client = S3Client(endpoint: proxy.endpoint, credentials: gateway.credentials, http: CurlHTTPClient(), retry: Self.quickRetries)
        let key = "faults/\(UUID().uuidString)/slow-down"
        let bytes = Data("through the faults".utf8)

        proxy.inject([.slowDown, .internalError, .slowDown])
        try await client.put(key: key, body: bytes)
        #expect(proxy.count("PUT") == 4, "three refusals, then the write that reached the gateway")
        #expect(try await gateway.client().get(key: key, maxBytes: 1000) == bytes)
    }

    @Test func aGatewayAnsweringOnly503IsUnavailableOnceTheBudgetIsSpent() async throws {
        let gateway = try await S3Gateway.connection()
        let proxy = try await S3FaultProxy.start(before: gateway.endpoint)
        defer { Task { await proxy.stop() } }
        proxy.setDown(true)
        // A budget of many backoffs (20–100 ms each), so that even a first request slowed by a
        // loaded machine leaves room for another try: the count, not the time, is asserted.
        let budget = S3RetryPolicy(base: .milliseconds(20), cap: .milliseconds(100), budget: .seconds(3), requestTimeout: .seconds(5))
        let storage = S3ImageStorage(
            client: S3Client(endpoint: proxy.endpoint, credentials: gateway.credentials, http: CurlHTTPClient(), retry: budget),
            prefix: "faults/\(UUID().uuidString)")
        let key = StorageKey.render(user: try StorageID("u1"), render: try StorageID("r1"))
        do {
            try await storage.write(Data("x".utf8), to: key)
            Issue.record("a write to a store answering 503 succeeded")
        } catch let failure as StorageFailure {
            #expect(failure.code == .unavailable)
            #expect(failure.description.contains("SlowDown"))
        }
        #expect(proxy.count("PUT") > 1, "tried again before giving up")

        proxy.setDown(false)
        try await storage.write(Data("x".utf8), to: key)
    }

    @Test func aStoreThatDoesNotAnswerIsUnavailableAndTheCheckNamesTheEndpoint() async throws {
        let gateway = try await S3Gateway.connection()
        // A port nothing listens on: every connection is refused.
        let closed = S3Endpoint(scheme: .http, host: "127.0.0.1", port: 9, region: gateway.endpoint.region, bucket: gateway.endpoint.bucket, addressing: .pathStyle)
        let budget = S3RetryPolicy(base: .milliseconds(10), cap: .milliseconds(50), budget: .milliseconds(300), requestTimeout: .seconds(2))
        let storage = S3ImageStorage(client: S3Client(endpoint: closed, credentials: gateway.credentials, http: CurlHTTPClient(), retry: budget), prefix: "")
        let key = StorageKey.upload(user: try StorageID("u1"), upload: try StorageID("up1"))
        await #expect(throws: StorageFailure.self) { try await storage.read(key, maxBytes: 100) }
        do {
            _ = try await storage.size(of: key)
        } catch let failure as StorageFailure {
            #expect(failure.code == .unavailable)
            #expect(failure.reading)
        }
        await #expect { try await storage.checkAccess() } throws: { ($0 as? ConfigurationError)?.variable == "AWS_ENDPOINT_URL_S3" }
    }

    @Test func wrongKeysAndAMissingBucketAreDeniedAndTheCheckNamesTheVariable() async throws {
        let gateway = try await S3Gateway.connection()
        let user = try StorageID("u1")
        let key = StorageKey.bodyPhoto(user: user, photo: try StorageID("b1"))

        let wrongSecret = S3ImageStorage(
            client: gateway.client(credentials: S3Credentials(accessKeyID: gateway.credentials.accessKeyID, secretAccessKey: "wrong")), prefix: "denied/")
        do {
            try await wrongSecret.write(Data("x".utf8), to: key)
            Issue.record("a write signed with the wrong secret succeeded")
        } catch let failure as StorageFailure {
            #expect(failure.code == .denied)
            #expect(!failure.description.contains("wrong"), "the secret is never told")
        }
        await #expect { try await wrongSecret.checkAccess() } throws: { ($0 as? ConfigurationError)?.variable == "AWS_SECRET_ACCESS_KEY" }

        let unknownKey = S3ImageStorage(client: gateway.client(credentials: S3Credentials(accessKeyID: "NOSUCHKEY", secretAccessKey: "x")), prefix: "")
        await #expect { try await unknownKey.checkAccess() } throws: { ($0 as? ConfigurationError)?.variable == "AWS_ACCESS_KEY_ID" }

        let otherBucket = S3Endpoint(
            scheme: .http, host: gateway.endpoint.host, port: gateway.endpoint.port, region: gateway.endpoint.region,
            bucket: "no-such-bucket-\(UUID().uuidString.prefix(8).lowercased())", addressing: .pathStyle)
        let missingBucket = S3ImageStorage(client: S3Client(endpoint: otherBucket, credentials: gateway.credentials, http: CurlHTTPClient()), prefix: "")
        do {
            try await missingBucket.write(Data("x".utf8), to: key)
            Issue.record("a write into a missing bucket succeeded")
        } catch let failure as StorageFailure {
            #expect(failure.code == .denied)
        }
        await #expect { try await missingBucket.checkAccess() } throws: { ($0 as? ConfigurationError)?.variable == "FLEET_STORAGE" }

        let good = S3ImageStorage(client: gateway.client(), prefix: "check/\(UUID().uuidString)/")
        try await good.checkAccess()
        #expect(try await gateway.client().list(prefix: good.prefix).keys.isEmpty, "the probe object is deleted")
    }

    /// A purge cut off after its first DeleteObjects (the process killed half way) leaves the rest
    /// (the gateway's first page: at most 1,000 keys, 975 seen here); the next purge deletes it and
    /// counts only what it deleted.
    @Test func aPurgeCutOffHalfWayIsFinishedByTheNext() async throws {
        let gateway = try await S3Gateway.connection()
        let proxy = try await S3FaultProxy.start(before: gateway.endpoint)
        defer { Task { await proxy.stop() } }
        let prefix = "purge/\(UUID().uuidString)/"
        let user = try StorageID("u1")
        let direct = S3ImageStorage(client: gateway.client(), prefix: prefix)
        try await ImageStorageContractTests.writeRenders(1_500, of: user, to: direct)

        let budget = S3RetryPolicy(base: .milliseconds(10), cap: .milliseconds(50), budget: .milliseconds(200), requestTimeout: .seconds(10))
        let cutOff = S3ImageStorage(client: S3Client(endpoint: proxy.endpoint, credentials: gateway.credentials, http: CurlHTTPClient(), retry: budget), prefix: prefix)
        // The first DeleteObjects goes through; the store is gone from the second on.
        proxy.goDown(afterForwarding: 1, of: "POST")
        await #expect(throws: StorageFailure.self) { _ = try await cutOff.deleteAll(of: user) }
        let left = try await Self.count(under: "\(prefix)\(user)/", on: gateway)
        // A listing page holds at most 1,000 keys (the gateway may answer fewer): that page went, the rest is left.
        #expect((500..<1_500).contains(left), "\(left) left")

        #expect(try await direct.deleteAll(of: user) == left)
        #expect(try await Self.count(under: "\(prefix)\(user)/", on: gateway) == 0)
    }

    /// The objects under `prefix`, counted a page at a time.
    static func count(under prefix: String, on gateway: S3Gateway.Connection) async throws -> Int {
        let client = gateway.client()
        var (count, token): (Int, String?) = (0, nil)
        repeat {
            let page = try await client.list(prefix: prefix, continuationToken: token)
            count += page.keys.count
            token = page.continuationToken
        } while token != nil
        return count
    }
}

/// A real `image-worker` keeping its images in the gateway's bucket through the fault proxy:
/// while the gateway answers only 503, the photo it was normalising is deferred with
/// `STORAGE_UNAVAILABLE` (its attempt not spent), `/readyz` says the store is down; once the
/// gateway answers again the photo is normalised at its first attempt and is in the bucket.
@Suite struct S3WorkerOutageTests {
    @Test func aPhotoWaitsOutAGatewayAnswering503AndIsNormalisedWhenItIsBack() async throws {
        let gateway = try await S3Gateway.connection()
        let proxy = try await S3FaultProxy.start(before: gateway.endpoint)
        defer { Task { await proxy.stop() } }
        let prefix = "outage/\(UUID().uuidString)"
        let storage = S3ImageStorage(client: gateway.client(), prefix: prefix)
        let user = try StorageID("u1")
        try await storage.write(RenderFixture.bodyPhoto, to: .upload(user: user, upload: try StorageID("up1")))

        let q = try await TestQueue.make()
        let worker = try ImageWorkerWithReadiness(q, environment: gateway.environment(prefix: prefix, through: proxy))
        defer { worker.process.signal(SIGKILL) }
        try await q.waitUntil(timeout: .seconds(90), "the worker ready, its store checked") { await worker.isReady() }

        proxy.setDown(true)
        let id = try await q.queue.enqueue(try NewJob(NormalizeImagePayload(
            userID: user, uploadID: try StorageID("up1"), target: .body, imageID: try StorageID("b1")))).id
        try await q.waitUntil(timeout: .seconds(120), "the photo deferred for the store's outage") {
            try await StorageOutageTests.count([id], withError: .unavailable, in: q) == 1
        }
        let deferred = try #require(try await q.queue.job(id: id))
        #expect(deferred.state != .dead && deferred.attempt <= 1, "\(deferred)\n\(worker.process.log)")
        try await q.waitUntil(timeout: .seconds(60), "/readyz saying the store is down") { await worker.saysStorageIsDown() }

        proxy.setDown(false)
        try await q.waitUntil(timeout: .seconds(120), "the photo normalised once the gateway answers") {
            try await q.queue.job(id: id)?.state == .completed
        }
        #expect(try await q.queue.job(id: id)?.attempt == 1)
        #expect(try await storage.read(.bodyPhoto(user: user, photo: try StorageID("b1")), maxBytes: 20 << 20).starts(with: [0xFF, 0xD8]))
        try await q.waitUntil(timeout: .seconds(60), "/readyz ready again") { await worker.isReady() }
    }
}

/// A worker moving its images back from a bucket (`FLEET_STORAGE` a file tree,
/// `FLEET_STORAGE_FALLBACK` the bucket) checks the bucket as it would its store: reads that miss
/// in the tree go there, so while it does not answer `/readyz` says so and no job is claimed.
@Suite struct S3FallbackReadinessTests {
    @Test func aFallbackBucketThatDoesNotAnswerKeepsTheWorkerUnready() async throws {
        let gateway = try await S3Gateway.connection()
        let proxy = try await S3FaultProxy.start(before: gateway.endpoint)
        defer { Task { await proxy.stop() } }
        proxy.setDown(true)
        let q = try await TestQueue.make()
        let tree = FileManager.default.temporaryDirectory.appendingPathComponent("fallback-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: tree) }
        var environment = gateway.environment(prefix: "fallback/\(UUID().uuidString)", through: proxy)
        environment["FLEET_STORAGE_FALLBACK"] = environment["FLEET_STORAGE"]
        environment["FLEET_STORAGE"] = "file://\(tree)"
        let worker = try ImageWorkerWithReadiness(q, environment: environment)
        defer { worker.process.signal(SIGKILL) }
        try await q.waitUntil(timeout: .seconds(90), "/readyz saying the fallback bucket is down") { await worker.saysStorageIsDown() }
        proxy.setDown(false)
        try await q.waitUntil(timeout: .seconds(90), "/readyz ready once the bucket answers") { await worker.isReady() }
    }
}

/// A real `image-worker` with its HTTP port, asked whether it is ready (`/readyz`).
struct ImageWorkerWithReadiness {
    let process: WorkerProcess
    private let readyz: String
    private let http = CurlHTTPClient()

    init(_ q: TestQueue, environment: [String: String]) throws {
        let port = try freePort()
        process = try WorkerProcess(
            databaseURL: q.url, executable: "image-worker", environment: environment.merging(["FLEET_HTTP_ADDRESS": "127.0.0.1:\(port)"]) { $1 })
        readyz = "http://127.0.0.1:\(port)/readyz"
    }

    func isReady() async -> Bool { await answer()?.status == 200 }

    /// Not ready, and the reason given is the store.
    func saysStorageIsDown() async -> Bool {
        guard let answer = await answer() else { return false }
        return answer.status == 503 && answer.text.contains("storage")
    }

    private func answer() async -> HTTPClientResponse? { try? await http.execute(HTTPClientRequest(url: readyz)) }
}
