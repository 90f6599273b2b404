@testable import DispatcherCore
@testable import DispatcherProtocol
import FleetAccess
import FleetHTTPClient
import FleetStorage
import FleetSupport
@testable import FleetTestSupport
import Imaging
import Foundation
@testable import Renders
import Testing

/// `upload.presign`, `image.url` and the renders' `resultUrl` against the real Ceph gateway
/// (`S3Gateway`): the dispatcher signs, and the gateway, which checks every signature itself,
/// decides. Each test writes under a prefix of its own (the gateway is shared by runs).
@Suite struct PresignedURLTests {
    let http = CurlHTTPClient()

    /// The gateway as the dispatcher's image store, below a fresh prefix.
    static func storage(_ gateway: S3Gateway.Connection) -> (location: StorageLocation, settings: S3StoreSettings) {
        let settings = S3StoreSettings(endpoint: gateway.endpoint, prefix: "presign-\(UUID().uuidString)/", credentials: gateway.credentials)
        return (.s3(settings), settings)
    }

    static func randomBytes(_ count: Int) -> Data { Data((0..<count).map { _ in UInt8.random(in: 0...255) }) }

    /// The error code `body` ends with, or nil when it succeeds.
    static func code(_ body: () async throws -> some Any) async -> String? {
        do { _ = try await body(); return nil } catch let error as DispatcherError { return error.code.rawValue } catch { return "\(error)" }
    }

    /// The object at a storage key, read with the store's own keys (what a worker would read).
    func stored(_ key: StorageKey, in settings: S3StoreSettings, gateway: S3Gateway.Connection) async throws -> HTTPClientResponse {
        try await http.execute(gateway.signed(.get, key: settings.objectKey(key.relativePath)))
    }

    /// An object written with the store's own keys (as the image and render workers write).
    func store(_ bytes: Data, at key: StorageKey, in settings: S3StoreSettings, gateway: S3Gateway.Connection) async throws {
        let put = try await http.execute(gateway.signed(.put, key: settings.objectKey(key.relativePath), body: bytes))
        #expect(put.status == 200)
    }

    /// A PUT of a presigned URL as a client sends it: the type given, and `If-None-Match: *` as signed.
    func put(_ url: String, type: String, _ bytes: Data) async throws -> Int {
        try await http.execute(HTTPClientRequest(
            method: .put, url: url, headers: [("Content-Type", type), ("If-None-Match", "*")], body: bytes)).status
    }

    /// `X-Amz-Signature`'s value in a presigned URL.
    static func signature(of url: String) throws -> String {
        guard let value = URLComponents(string: url)?.queryItems?.first(where: { $0.name == "X-Amz-Signature" })?.value else {
            throw TestFailure("no signature in \(url)")
        }
        return value
    }

    @Test func anUploadPresignedForItsLengthAndTypeIsStoredByAPlainPutAndNothingElse() async throws {
        let gateway = try await S3Gateway.connection()
        let (location, settings) = Self.storage(gateway)
        try await TestDispatcher.run(storage: location) { dispatcher in
            let client = try await dispatcher.client()
            let bytes = Self.randomBytes(120_000)
            let before = Date()
            let presigned = try await client.presignUpload(userId: "u1", contentType: .jpeg, contentLength: bytes.count)
            #expect(presigned.method == "PUT" && presigned.ownerId == "u1" && presigned.uploadId.hasPrefix("up-"))
            #expect(presigned.headers == ["Content-Type": "image/jpeg", "Content-Length": String(bytes.count), "If-None-Match": "*"])
            #expect(abs(presigned.expiresAt.timeIntervalSince(before) - 300) < 5, "default lifetime 300 s: \(presigned.expiresAt)")

            // The gateway refuses what was not signed: another length, another type, a changed
            // signature, another key.
            #expect(try await put(presigned.url, type: "image/jpeg", bytes + Data([0])) == 403)
            #expect(try await put(presigned.url, type: "image/png", bytes) == 403)
            let signature = try Self.signature(of: presigned.url)
            let tampered = presigned.url.replacingOccurrences(of: signature, with: String(signature.reversed()))
            #expect(try await put(tampered, type: "image/jpeg", bytes) == 403)
            let otherKey = presigned.url.replacingOccurrences(of: presigned.uploadId, with: "up-someone-elses")
            #expect(try await put(otherKey, type: "image/jpeg", bytes) == 403)
            let upload = StorageKey.upload(user: try StorageID("u1"), upload: try StorageID(presigned.uploadId))
            #expect(try await stored(upload, in: settings, gateway: gateway).status == 404, "nothing refused was stored")

            // A plain PUT with no credentials stores the bytes where the image worker reads the upload.
            #expect(try await put(presigned.url, type: "image/jpeg", bytes) == 200)
            let read = try await stored(upload, in: settings, gateway: gateway)
            #expect(read.status == 200 && read.body == bytes)
            // Once stored, the upload is never replaced: not by the same URL, not by a fresh one for its id.
            #expect(try await put(presigned.url, type: "image/jpeg", bytes) == 412)
            let again = try await client.presignUpload(userId: "u1", uploadId: presigned.uploadId, contentType: .jpeg, contentLength: 3)
            #expect(try await put(again.url, type: "image/jpeg", Data([1, 2, 3])) == 412)
            #expect(try await http.execute(HTTPClientRequest(method: .put, url: again.url, headers: [("Content-Type", "image/jpeg")], body: Data([1, 2, 3]))).status == 403,
                    "without the signed If-None-Match")
            #expect(try await stored(upload, in: settings, gateway: gateway).body == bytes)

            // The caller's upload id, as image.normalize takes it; an onboarding token's tree.
            let named = try await client.presignUpload(userId: "u1", uploadId: "up-mine", contentType: .heic, contentLength: 10)
            #expect(named.uploadId == "up-mine" && named.headers["Content-Type"] == "image/heic")
            let issued = try await client.send(IssueTokenRequest())
            let onboarding = try await client.presignUpload(ephemeralToken: issued.token, contentType: .png, contentLength: 10)
            #expect(onboarding.ownerId == issued.tokenId)
            #expect(await Self.code { try await client.presignUpload(ephemeralToken: "eph_unknown", contentType: .png, contentLength: 10) } == "INVALID_TOKEN")
            #expect(await Self.code { try await client.presignUpload(userId: "u1", ephemeralToken: issued.token, contentType: .png, contentLength: 10) } == "BAD_ARGUMENT")
            #expect(await Self.code { try await client.presignUpload(contentType: .png, contentLength: 10) } == "BAD_ARGUMENT")
            await client.close()
        }
    }

    @Test func getURLsReadTheOwnersImagesAndCompleteRendersCarryOne() async throws {
        let gateway = try await S3Gateway.connection()
        let (location, settings) = Self.storage(gateway)
        try await TestDispatcher.run(storage: location) { dispatcher in
            let client = try await dispatcher.client()
            let user = try StorageID("u1")
            let body = Self.randomBytes(50_000), cutout = Self.randomBytes(40_000), result = Self.randomBytes(60_000)
            try await store(body, at: .bodyPhoto(user: user, photo: try StorageID("b1")), in: settings, gateway: gateway)
            try await store(cutout, at: .garmentCutout(user: user, garment: try StorageID("g1")), in: settings, gateway: gateway)

            let bodyURL = try await client.imageURL(userId: "u1", kind: .body, id: "b1", expiresInSeconds: 900)
            #expect(bodyURL.method == "GET" && bodyURL.headers.isEmpty)
            let bodyRead = try await http.execute(HTTPClientRequest(url: bodyURL.url))
            #expect(bodyRead.status == 200 && bodyRead.body == body)
            #expect(try await http.execute(HTTPClientRequest(url: try await client.imageURL(userId: "u1", kind: .cutout, id: "g1").url)).body == cutout)
            // Another owner's URL names another key: nothing of u1's is reachable by it.
            #expect(try await http.execute(HTTPClientRequest(url: try await client.imageURL(userId: "u2", kind: .body, id: "b1").url)).status == 404)

            // A render: its URL once complete, from the row's tree, for its own user only.
            try await RenderOperationTests.grant(dispatcher, "u1", credits: 1)
            _ = try await client.send(RenderOperationTests.request("r1"))
            #expect(try await client.send(RenderStatusRequest(renderId: "r1")).resultUrl == nil, "pending: no result yet")
            #expect(await Self.code { try await client.imageURL(userId: "u1", kind: .render, id: "r1") } == "RENDER_NOT_COMPLETE")
            let renders = RenderStore(pool: dispatcher.queue.pool)
            guard case .started = try await renders.start(id: "r1") else { Issue.record("not started"); return }
            try await store(result, at: .render(user: user, render: try StorageID("r1")), in: settings, gateway: gateway)
            #expect(try await renders.complete(id: "r1", resultPath: "u1/renders/r1.jpg"))

            let status = try await client.send(RenderStatusRequest(renderId: "r1"))
            let statusURL = try #require(status.resultUrl)
            #expect(try await http.execute(HTTPClientRequest(url: statusURL)).body == result)
            let waited = try await client.send(WaitRenderRequest(renderId: "r1", timeoutMs: 1000))
            #expect(try await http.execute(HTTPClientRequest(url: try #require(waited.render.resultUrl))).body == result)
            #expect(try await http.execute(HTTPClientRequest(url: try await client.imageURL(userId: "u1", kind: .render, id: "r1").url)).body == result)
            #expect(await Self.code { try await client.imageURL(userId: "u2", kind: .render, id: "r1") } == "NOT_FOUND")
            await client.close()
        }
    }

    @Test func anExpiredURLIsRefusedByTheGateway() async throws {
        let gateway = try await S3Gateway.connection()
        try await TestDispatcher.run(storage: Self.storage(gateway).location) { dispatcher in
            let client = try await dispatcher.client()
            let bytes = Self.randomBytes(1000)
            let presigned = try await client.presignUpload(userId: "u1", contentType: .webp, contentLength: bytes.count, expiresInSeconds: 5)
            #expect(try await put(presigned.url, type: "image/webp", bytes) == 200, "good within its lifetime")
            // Polls the same URL (412 while valid: the upload is there) until the gateway refuses
            // it as expired (403); at most 60 s, guarding a hang.
            try await waitFor("the URL to expire") { try await put(presigned.url, type: "image/webp", bytes) == 403 }
            #expect(Date() >= presigned.expiresAt.addingTimeInterval(-1), "refused only once expired")
            await client.close()
        }
    }

    @Test func argumentsOutOfBoundsAreRefusedBeforeAnythingIsSigned() async throws {
        let gateway = try await S3Gateway.connection()
        try await TestDispatcher.run(storage: Self.storage(gateway).location) { dispatcher in
            let client = try await dispatcher.client()
            for seconds in [0, 901, -1] {
                #expect(await Self.code { try await client.presignUpload(userId: "u1", contentType: .jpeg, contentLength: 10, expiresInSeconds: seconds) } == "BAD_ARGUMENT")
                #expect(await Self.code { try await client.imageURL(userId: "u1", kind: .body, id: "b1", expiresInSeconds: seconds) } == "BAD_ARGUMENT")
            }
            #expect(try await client.presignUpload(userId: "u1", contentType: .jpeg, contentLength: 10, expiresInSeconds: 900).method == "PUT")
            let limit = ImageLimits().maxBytes
            #expect(try await client.presignUpload(userId: "u1", contentType: .jpeg, contentLength: limit).method == "PUT")
            #expect(await Self.code { try await client.presignUpload(userId: "u1", contentType: .jpeg, contentLength: limit + 1) } == "IMAGE_TOO_LARGE")
            #expect(await Self.code { try await client.presignUpload(userId: "u1", contentType: .jpeg, contentLength: 0) } == "BAD_ARGUMENT")
            #expect(await Self.code { try await client.presignUpload(userId: "../u2", contentType: .jpeg, contentLength: 10) } == "BAD_ARGUMENT")
            #expect(await Self.code { try await client.presignUpload(userId: "u1", uploadId: "a/b", contentType: .jpeg, contentLength: 10) } == "BAD_ARGUMENT")
            #expect(await Self.code { try await client.imageURL(userId: "u1", kind: .body, id: "../../u2/body/b1") } == "BAD_ARGUMENT")
            try await dispatcher.withRawConnection(.unix) { raw in
                try await raw.greeting()
                try await raw.send(#"{"id":1,"op":"upload.presign","args":{"userId":"u1","contentType":"image/gif","contentLength":10}}"# + "\n")
                let gif = try await raw.response()
                #expect(gif.errorCode == "BAD_ARGUMENT")
                #expect("\(gif.jsonText)".contains("image/jpeg, image/png, image/webp, image/heic"))
            }
            await client.close()
        }
    }

    @Test func onlySubmittersGetURLsAndAReadTokenSeesRendersWithoutThem() async throws {
        let gateway = try await S3Gateway.connection()
        let (location, settings) = Self.storage(gateway)
        try await TestDispatcher.run(storage: location) { dispatcher in
            let tokens = AccessTokenStore(pool: dispatcher.queue.pool)
            let readToken = try await tokens.create(name: "dashboard", role: .read)
            let submitToken = try await tokens.create(name: "backend", role: .submit)
            // The dispatcher re-reads the tokens every 2 s: until then they are refused.
            var connected: (reader: DispatcherClient, backend: DispatcherClient)?
            try await waitFor("the new tokens") {
                guard let reader = try? await dispatcher.client(.tcp, token: readToken),
                      let backend = try? await dispatcher.client(.tcp, token: submitToken) else { return false }
                connected = (reader, backend)
                return true
            }
            let (reader, backend) = try #require(connected)
            try await RenderOperationTests.grant(dispatcher, "u1", credits: 1)
            _ = try await backend.send(RenderOperationTests.request("r1"))
            let renders = RenderStore(pool: dispatcher.queue.pool)
            guard case .started = try await renders.start(id: "r1") else { Issue.record("not started"); return }
            try await store(Data("result".utf8), at: .render(user: try StorageID("u1"), render: try StorageID("r1")), in: settings, gateway: gateway)
            #expect(try await renders.complete(id: "r1", resultPath: "u1/renders/r1.jpg"))

            #expect(await Self.code { try await reader.presignUpload(userId: "u1", contentType: .jpeg, contentLength: 10) } == "FORBIDDEN")
            #expect(await Self.code { try await reader.imageURL(userId: "u1", kind: .render, id: "r1") } == "FORBIDDEN")
            let seen = try await reader.send(RenderStatusRequest(renderId: "r1"))
            #expect(seen.status == .complete && seen.resultUrl == nil)
            #expect(try await reader.send(WaitRenderRequest(renderId: "r1")).render.resultUrl == nil)

            #expect(try await backend.presignUpload(userId: "u1", contentType: .jpeg, contentLength: 10).method == "PUT")
            #expect(try await backend.send(RenderStatusRequest(renderId: "r1")).resultUrl != nil)
            await reader.close()
            await backend.close()
        }
    }

    @Test func theFileStoreAnswersItsOwnCodeAndRendersCarryNoURL() async throws {
        try await TestDispatcher.run { dispatcher in
            let client = try await dispatcher.client()
            do {
                _ = try await client.presignUpload(userId: "u1", contentType: .jpeg, contentLength: 10)
                Issue.record("a files store presigned")
            } catch let error as DispatcherError {
                #expect(error.code == .storageNotPresignable && error.message.contains("FLEET_STORAGE=s3://"), "\(error)")
            }
            #expect(await Self.code { try await client.imageURL(userId: "u1", kind: .garment, id: "g1") } == "STORAGE_NOT_PRESIGNABLE")
            try await RenderOperationTests.grant(dispatcher, "u1", credits: 1)
            _ = try await client.send(RenderOperationTests.request("r1"))
            let renders = RenderStore(pool: dispatcher.queue.pool)
            guard case .started = try await renders.start(id: "r1") else { Issue.record("not started"); return }
            #expect(try await renders.complete(id: "r1", resultPath: "u1/renders/r1.jpg"))
            let complete = try await client.send(RenderStatusRequest(renderId: "r1"))
            #expect(complete.status == .complete && complete.resultPath == "u1/renders/r1.jpg" && complete.resultUrl == nil)
            await client.close()
        }
    }

    /// The real executable, configured as operators do (`FLEET_STORAGE` and the AWS CLI's
    /// variables), logging everything: its URLs work, and no signature reaches its log.
    @Test func theDispatcherExecutableSignsFromItsEnvironmentAndNeverLogsASignature() async throws {
        let gateway = try await S3Gateway.connection()
        let prefix = "presign-\(UUID().uuidString)"
        let endpoint = gateway.endpoint
        let dispatcher = try DispatcherProcess(databaseURL: try await PostgresCluster.shared.makeDatabase(), environment: [
            "FLEET_STORAGE": "s3://\(endpoint.bucket)/\(prefix)", "AWS_ACCESS_KEY_ID": gateway.credentials.accessKeyID,
            "AWS_SECRET_ACCESS_KEY": gateway.credentials.secretAccessKey, "AWS_REGION": endpoint.region,
            "AWS_ENDPOINT_URL_S3": "http://\(endpoint.hostHeader)", "FLEET_LOG_LEVEL": "trace",
        ])
        try await dispatcher.start()
        let client = try await dispatcher.client()
        let bytes = Self.randomBytes(2000)
        let upload = try await client.presignUpload(userId: "u1", contentType: .png, contentLength: bytes.count)
        #expect(try await put(upload.url, type: "image/png", bytes) == 200)
        let settings = S3StoreSettings(endpoint: endpoint, prefix: prefix, credentials: gateway.credentials)
        let key = StorageKey.upload(user: try StorageID("u1"), upload: try StorageID(upload.uploadId))
        #expect(try await stored(key, in: settings, gateway: gateway).body == bytes, "below FLEET_STORAGE's prefix")
        try await store(bytes, at: .bodyPhoto(user: try StorageID("u1"), photo: try StorageID("b1")), in: settings, gateway: gateway)
        let download = try await client.imageURL(userId: "u1", kind: .body, id: "b1")
        #expect(try await http.execute(HTTPClientRequest(url: download.url)).body == bytes)
        await client.close()
        dispatcher.signal(SIGTERM)
        #expect(await dispatcher.wait(timeout: .seconds(30)) == 0)

        let log = dispatcher.log
        #expect(log.contains("s3 bucket \(endpoint.bucket)"), "the start line names the store: \(log.prefix(3000))")
        // Each URL is logged without its query: the path is there, the signature is not.
        #expect(log.contains("upload presigned") && log.contains("\(prefix)/u1/uploads/\(upload.uploadId) (signature withheld)"), "\(log.suffix(3000))")
        #expect(log.contains("image URL presigned") && log.contains("\(prefix)/u1/body/b1.jpg (signature withheld)"), "\(log.suffix(3000))")
        for url in [upload.url, download.url] {
            #expect(!log.contains(try Self.signature(of: url)), "a signature in the log")
        }
        #expect(!log.contains(gateway.credentials.secretAccessKey))
    }
}
