import FleetPostgres
@testable import FleetQueue
import FleetStorage
import FleetSupport
@testable import FleetTestSupport
import Foundation
@testable import Imaging
import Logging
import RenderLedger
import Renders
import Testing

/// The normalise job through the handler, with a real filesystem tree and real libvips.
@Suite struct NormalizeHandlerTests {
    let root = FileManager.default.temporaryDirectory.appendingPathComponent("images-\(UUID().uuidString.prefix(8))").path
    var storage: FileImageStorage { FileImageStorage(root: root) }
    /// Follow-up jobs land in a real queue.
    static let queue = Task { try await TestQueue.make() }

    func job(_ payload: String, attempt: Int = 1, id: Int64 = 1) -> ClaimedJob {
        ClaimedJob(id: id, kind: .imageNormalize, queue: "default", priority: 2, attempt: attempt, maxAttempts: 5,
                   payload: payload, createdAt: Date())
    }

    func run(_ payload: String, handler: (any JobHandler)? = nil, id: Int64 = 1) async throws -> JSONValue? {
        let handler = handler ?? NormalizeHandler(storage: storage, normalizer: ImageNormalizer(), profiles: NormalizeProfiles.builtIn)
        let context = JobContext(logger: Logger(label: "test"), workerID: "test", queue: try await Self.queue.value.queue)
        return try await handler.run(job(payload, id: id), context: context)
    }

    func upload(_ data: Data, user: String, id: String) throws {
        try AtomicFile.write(data, to: "\(root)/\(user)/uploads/\(id)")
    }

    @Test func storesTheNormalisedGarmentAndReportsIt() async throws {
        try upload(Data(contentsOf: corpus.appendingPathComponent("phone-4032x3024-orient6.jpg")), user: "u1", id: "up1")
        let result = try await run(#"{"userId":"u1","uploadId":"up1","target":"garment","imageId":"g1"}"#)
        let written = try Data(contentsOf: URL(fileURLWithPath: "\(root)/u1/garments/g1.jpg"))
        #expect(result == .object(["path": .string("u1/garments/g1.jpg"), "width": .number(1200), "height": .number(1600),
                                   "bytes": .number(Double(written.count)), "profile": .string("upload")]))
        // No temporary file is left beside it.
        #expect(try FileManager.default.contentsOfDirectory(atPath: "\(root)/u1/garments") == ["g1.jpg"])
    }

    @Test func theJobsProfileDecidesTheSize() async throws {
        try upload(Data(contentsOf: corpus.appendingPathComponent("phone-4032x3024-orient6.jpg")), user: "u1", id: "up1")
        for (profile, width, height) in [("thumb", 300, 400), ("trial-room", 1500, 2000), ("upload", 1200, 1600)] {
            let result = try await run(#"{"userId":"u1","uploadId":"up1","target":"body","imageId":"b1","profile":"\#(profile)"}"#)
            guard case .object(let fields)? = result else { throw TestFailure("no result") }
            #expect([fields["width"], fields["height"], fields["profile"]] == [.number(Double(width)), .number(Double(height)), .string(profile)])
            #expect(try VipsImageRef.decode(Data(contentsOf: URL(fileURLWithPath: "\(root)/u1/body/b1.jpg"))).width == width)
        }
    }

    /// A running handler reads `fleet_settings` for every job: a profile added, changed or
    /// removed applies to the next job, and one nobody defined ends the job `dead` at once.
    @Test func profilesChangedInFleetSettingsApplyWithoutARestart() async throws {
        let database = try await TestQueue.make()
        let stored = StoredNormalizeProfiles(pool: database.pool)
        let handler = NormalizeHandler(storage: storage, normalizer: ImageNormalizer(), profiles: stored)
        try upload(Data(contentsOf: corpus.appendingPathComponent("bythewater-2560x1600.jpg")), user: "u1", id: "up1")
        let payload = #"{"userId":"u1","uploadId":"up1","target":"garment","imageId":"g1","profile":"poster"}"#
        func isUnknownProfile(_ error: any Error) -> Bool {
            guard case JobError.permanent(let code, let message) = error else { return false }
            return code == .imageProfileUnknown && message == #"unknown image profile "poster" (known: thumb, trial-room, upload)"#
        }
        await #expect { _ = try await run(payload, handler: handler) } throws: { isUnknownProfile($0) }
        #expect(!FileManager.default.fileExists(atPath: "\(root)/u1/garments/g1.jpg"))

        try await stored.set("poster", to: NormalizeProfile(maxWidth: 640, quality: 90))
        guard case .object(let first)? = try await run(payload, handler: handler) else { throw TestFailure("no result") }
        #expect([first["width"], first["height"]] == [.number(640), .number(400)])
        #expect(jpegLuminanceTable(try Data(contentsOf: URL(fileURLWithPath: "\(root)/u1/garments/g1.jpg"))) == ijgLuminanceTable(quality: 90))

        try await stored.set("poster", to: NormalizeProfile(maxHeight: 100))
        guard case .object(let second)? = try await run(payload, handler: handler) else { throw TestFailure("no result") }
        #expect([second["width"], second["height"]] == [.number(160), .number(100)])

        try await stored.remove("poster")
        await #expect { _ = try await run(payload, handler: handler) } throws: { isUnknownProfile($0) }
        // Settings an operator broke by hand: retried (with backoff) until fixed, not dead.
        try await database.pool.query(#"UPDATE fleet_settings SET value = '{"poster": {}}' WHERE key = 'image.profiles'"#)
        await #expect { _ = try await run(payload, handler: handler) } throws: { error in
            guard case JobError.retryable(let message) = error else { return false }
            return message == #"image.profiles in fleet_settings: profile "poster": needs maxWidth, maxHeight or both"#
        }
    }

    @Test func aGarmentWithThenCutoutChainsOneCutoutJobEvenWhenRunTwice() async throws {
        try upload(Data(contentsOf: corpus.appendingPathComponent("honeywave-1080x1920.jpg")), user: "u1", id: "up3")
        let payload = #"{"userId":"u1","uploadId":"up3","target":"garment","imageId":"g3","thenCutout":true}"#
        let jobID = Int64.random(in: 1_000_000...9_000_000)
        let first = try await run(payload, id: jobID)
        let again = try await run(payload, id: jobID)  // a retried attempt of the same job
        guard case .object(let fields)? = first, case .number(let cutoutID)? = fields["cutoutJobId"] else {
            Issue.record("no cutout job in \(String(describing: first))")
            return
        }
        #expect(first == again)
        let record = try #require(try await Self.queue.value.queue.job(id: Int64(cutoutID)))
        #expect(record.kind == .garmentCutout)
        let chained = try JSONDecoder().decode([String: String].self, from: Data(record.payload.utf8))
        #expect(chained == ["userId": "u1", "garmentId": "g3"])
        // Only garments can chain a cut-out.
        await #expect(throws: JobError.self) {
            _ = try await run(#"{"userId":"u1","uploadId":"up3","target":"body","imageId":"b3","thenCutout":true}"#)
        }
    }

    @Test func aBadUploadEndsWithItsCodeAndStaysAsItWas() async throws {
        let text = Data("not an image".utf8)
        try upload(text, user: "u1", id: "up2")
        await #expect {
            _ = try await run(#"{"userId":"u1","uploadId":"up2","target":"body","imageId":"b1"}"#)
        } throws: { error in
            guard case JobError.permanent(let code, _) = error else { return false }
            return code == .imageInvalid
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: "\(root)/u1/uploads/up2")) == text)
        #expect(!FileManager.default.fileExists(atPath: "\(root)/u1/body/b1.jpg"))
    }

    @Test(arguments: [
        #"{"userId":"../etc","uploadId":"up1","target":"body","imageId":"b1"}"#,
        #"{"userId":"u1","uploadId":"a/b","target":"body","imageId":"b1"}"#,
        #"{"userId":"u1","uploadId":"up1","target":"body","imageId":""}"#,
        #"{"userId":"u1","uploadId":"up1","target":"avatar","imageId":"b1"}"#,
    ])
    func idsThatCouldLeaveTheTreeAreRefused(payload: String) async throws {
        await #expect {
            _ = try await run(payload)
        } throws: { error in
            guard case JobError.permanent(let code, _) = error else { return false }
            return code == .malformedPayload
        }
    }

    @Test func aMissingUploadIsAPermanentError() async throws {
        await #expect {
            _ = try await run(#"{"userId":"u9","uploadId":"none","target":"body","imageId":"b1"}"#)
        } throws: { error in
            guard case JobError.permanent(let code, _) = error else { return false }
            return code == .imageNotFound
        }
    }

    @Test func purgeDeletesEveryFileOfOneUserAndNoOneElse() async throws {
        let photo = try Data(contentsOf: corpus.appendingPathComponent("honeywave-1080x1920.jpg"))
        for user in ["u1", "u2"] {
            try upload(photo, user: user, id: "up1")
            _ = try await run(#"{"userId":"\#(user)","uploadId":"up1","target":"garment","imageId":"g1"}"#)
            _ = try await run(#"{"userId":"\#(user)","uploadId":"up1","target":"body","imageId":"b1"}"#)
            try await storage.write(photo, to: .render(user: StorageID(user), render: StorageID("r1")))
        }
        // Rows of its own: the suite's shared database holds cut-outs of u1 that other tests
        // left queued, which a purge rightly waits for.
        let purge = PurgeHandler(storage: storage, accounts: AccountErasure(pool: try await TestQueue.make().pool))
        #expect(try await run(#"{"userId":"u1"}"#, handler: purge) == .object(["filesDeleted": .number(4)]))
        #expect(!FileManager.default.fileExists(atPath: "\(root)/u1"))
        #expect(FileManager.default.fileExists(atPath: "\(root)/u2/renders/r1.jpg"))
        // Purging again is harmless; ids that could escape are refused.
        #expect(try await run(#"{"userId":"u1"}"#, handler: purge) == .object(["filesDeleted": .number(0)]))
        await #expect(throws: JobError.self) { _ = try await run(#"{"userId":".."}"#, handler: purge) }
        #expect(FileManager.default.fileExists(atPath: "\(root)/u2/garments/g1.jpg"))
    }
}
