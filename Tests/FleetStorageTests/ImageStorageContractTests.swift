import FleetHTTPClient
import FleetObjectStore
import FleetStorage
@testable import FleetTestSupport
import Foundation
import Testing

/// The stores the contract runs against: a folder of files, and a bucket on the real Ceph RADOS
/// gateway of `scripts/s3.sh` (each test under a prefix of its own).
enum StoreUnderTest: String, CaseIterable, CustomTestStringConvertible, Sendable {
    case files
    case gateway

    var testDescription: String { rawValue }

    /// A fresh, empty store of this kind.
    func make() async throws -> any ImageStorage {
        switch self {
        case .files:
            return FileImageStorage(root: temporaryPath("contract-files"))
        case .gateway:
            let gateway = try await S3Gateway.connection()
            return S3ImageStorage(client: gateway.client(), prefix: "contract/\(UUID().uuidString)/")
        }
    }
}

/// What every `ImageStorage` promises, checked on each conformer alike (River's driver-suite
/// style): a store that passes here can replace the other under the handlers.
@Suite struct ImageStorageContractTests {
    static func bytes(_ count: Int) -> Data { Data((0..<count).map { _ in UInt8.random(in: 0...255) }) }
    static func user(_ name: String = "u1") throws -> StorageID { try StorageID(name) }

    @Test(arguments: StoreUnderTest.allCases)
    func aWrittenObjectIsReadBackByteEqualItsSizeKnownBeforeItsBytes(_ kind: StoreUnderTest) async throws {
        let storage = try await kind.make()
        let key = StorageKey.bodyPhoto(user: try Self.user(), photo: try StorageID("b1"))
        let data = Self.bytes(300_000)
        try await storage.write(data, to: key)

        #expect(try await storage.size(of: key) == data.count)
        #expect(try await storage.read(key, maxBytes: data.count) == data)
        let copied = try await storage.withFileForReading(key, maxBytes: data.count) { path in
            (try Data(contentsOf: URL(fileURLWithPath: path)), path)
        }
        #expect(copied.0 == data)
        if kind == .gateway {
            #expect(!FileManager.default.fileExists(atPath: copied.1), "the temporary copy is removed after use")
        }
        #expect(try await storage.holds(key))
    }

    @Test(arguments: StoreUnderTest.allCases)
    func anObjectOverTheReadersBoundIsRefusedAndAMissingOneIsNotFound(_ kind: StoreUnderTest) async throws {
        let storage = try await kind.make()
        let key = StorageKey.upload(user: try Self.user(), upload: try StorageID("big"))
        try await storage.write(Self.bytes(10_001), to: key)
        await #expect(throws: StorageError.tooLarge(key.relativePath, bytes: 10_001, limit: 10_000)) {
            try await storage.read(key, maxBytes: 10_000)
        }
        await #expect(throws: StorageError.tooLarge(key.relativePath, bytes: 10_001, limit: 10_000)) {
            try await storage.withFileForReading(key, maxBytes: 10_000) { _ in Issue.record("no file for an object over the bound") }
        }

        let missing = StorageKey.upload(user: try Self.user(), upload: try StorageID("missing"))
        await #expect(throws: StorageError.notFound(missing.relativePath)) { try await storage.size(of: missing) }
        await #expect(throws: StorageError.notFound(missing.relativePath)) { try await storage.read(missing, maxBytes: 1000) }
        #expect(try await !storage.holds(missing))
    }

    @Test(arguments: StoreUnderTest.allCases)
    func aWriteReplacesAConditionalWriteNeverDoes(_ kind: StoreUnderTest) async throws {
        let storage = try await kind.make()
        let key = StorageKey.render(user: try Self.user(), render: try StorageID("r1"))
        let (first, second, third) = (Self.bytes(1000), Self.bytes(2000), Self.bytes(3000))
        try await storage.write(first, to: key)
        try await storage.write(second, to: key)
        #expect(try await storage.read(key, maxBytes: 10_000) == second)

        await #expect(throws: StorageError.alreadyExists(key.relativePath)) { try await storage.create(third, at: key) }
        #expect(try await storage.read(key, maxBytes: 10_000) == second, "a refused conditional write changes nothing")

        let fresh = StorageKey.render(user: try Self.user(), render: try StorageID("r2"))
        try await storage.create(third, at: fresh)
        #expect(try await storage.read(fresh, maxBytes: 10_000) == third)
    }

    @Test(arguments: StoreUnderTest.allCases)
    func deletingIsIdempotent(_ kind: StoreUnderTest) async throws {
        let storage = try await kind.make()
        let key = StorageKey.garmentCutout(user: try Self.user(), garment: try StorageID("g1"))
        try await storage.delete(key)
        try await storage.write(Self.bytes(100), to: key)
        try await storage.delete(key)
        #expect(try await !storage.holds(key))
        try await storage.delete(key)
        #expect(try await storage.deleteAll(of: try Self.user("nobody")) == 0)
    }

    /// More than one DeleteObjects' worth (1,000 keys) for one user; another user's tree stays.
    @Test(arguments: StoreUnderTest.allCases)
    func deleteAllDeletesEveryObjectOfOneUserAndCountsThem(_ kind: StoreUnderTest) async throws {
        let storage = try await kind.make()
        let (user, other) = (try Self.user("purged"), try Self.user("kept"))
        let count = 1_234
        try await Self.writeRenders(count, of: user, to: storage)
        let kept = StorageKey.bodyPhoto(user: other, photo: try StorageID("b1"))
        try await storage.write(Self.bytes(10), to: kept)

        #expect(try await storage.deleteAll(of: user) == count)
        #expect(try await !storage.holds(.render(user: user, render: try StorageID("r0"))))
        #expect(try await storage.deleteAll(of: user) == 0)
        #expect(try await storage.holds(kept))
    }

    /// Pages of 7 from a cursor each: every object once, with its size, and its MD5 where the
    /// store keeps one; a cursor taken from half way lists the rest (a copy resumes from it).
    @Test(arguments: StoreUnderTest.allCases)
    func listingPagesThroughEveryObjectOnceWithItsSizeAndChecksum(_ kind: StoreUnderTest) async throws {
        let storage = try await kind.make()
        let empty = try await storage.list(after: nil, limit: 7)
        #expect(empty.objects.isEmpty && empty.next == nil)

        var written: [StorageKey: Data] = [:]
        for user in ["u1", "u1-b", "u2"] {
            let id = try StorageID(user)
            for key in [
                StorageKey.upload(user: id, upload: try StorageID("up1")), .bodyPhoto(user: id, photo: try StorageID("b1")),
                .garment(user: id, garment: try StorageID("g1")), .garmentCutout(user: id, garment: try StorageID("g1")),
                .garmentPreview(user: id, garment: try StorageID("g1")), .render(user: id, render: try StorageID("r1")),
                .render(user: id, render: try StorageID("r2")),
            ] {
                written[key] = Self.bytes(Int.random(in: 1...3000))
            }
        }
        for (key, data) in written { try await storage.write(data, to: key) }

        var listed: [StoredObject] = []
        var cursors: [String] = []
        var cursor: String? = nil
        repeat {
            let page = try await storage.list(after: cursor, limit: 7)
            #expect(page.objects.count <= 7)
            #expect(page.foreign.isEmpty)
            listed += page.objects
            cursor = page.next
            if let cursor { cursors.append(cursor) }
        } while cursor != nil
        #expect(listed.count == written.count, "each object once")
        #expect(Set(listed.map(\.key)) == Set(written.keys))
        for object in listed {
            let data = try #require(written[object.key])
            #expect(object.size == data.count)
            #expect(object.md5 == nil || object.md5 == StoredObject.md5(of: data), "\(object.key.relativePath)")
            let info = try await storage.info(of: object.key)
            #expect(info.size == data.count && (info.md5 == nil || info.md5 == StoredObject.md5(of: data)))
        }
        if kind == .gateway { #expect(listed.allSatisfy { $0.md5 != nil }, "one PUT each: the ETag is the MD5") }

        let halfWay = cursors[cursors.count / 2]
        let rest = try await Self.listAll(storage, after: halfWay)
        let before = listed.prefix { $0.key.relativePath != halfWay }.count + 1
        #expect(rest.map(\.key) == listed.dropFirst(before).map(\.key), "the same order from a cursor")
        await #expect(throws: StorageError.notFound("u9/renders/r1.jpg")) { try await storage.info(of: .render(user: try Self.user("u9"), render: try StorageID("r1"))) }
    }

    /// Every object after `cursor`, a page of 100 at a time.
    static func listAll(_ storage: any ImageStorage, after cursor: String? = nil) async throws -> [StoredObject] {
        var objects: [StoredObject] = []
        var cursor = cursor
        repeat {
            let page = try await storage.list(after: cursor, limit: 100)
            objects += page.objects
            cursor = page.next
        } while cursor != nil
        return objects
    }

    /// `count` small render objects of `user`, 16 writes at a time.
    static func writeRenders(_ count: Int, of user: StorageID, to storage: any ImageStorage) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<count {
                if index >= 16 { try await group.next() }
                group.addTask { try await storage.write(Data("r\(index)".utf8), to: .render(user: user, render: try StorageID("r\(index)"))) }
            }
            try await group.waitForAll()
        }
    }
}

extension S3Gateway.Connection {
    /// A client of the gateway, with the given keys instead of its own.
    func client(credentials: S3Credentials? = nil, retry: S3RetryPolicy = S3RetryPolicy()) -> S3Client {
        S3Client(endpoint: endpoint, credentials: credentials ?? self.credentials, http: CurlHTTPClient(), retry: retry)
    }
}
