import FleetObjectStore
import FleetStorage
@testable import FleetTestSupport
import Foundation
import Testing

/// `FallbackImageStorage` over each store as the new one and a file tree as the old one (the move
/// `docs/operations.md` describes): reads fall back, writes never reach the old store, deletions
/// reach both.
@Suite struct FallbackImageStorageTests {
    struct Stores {
        let new: any ImageStorage
        let old: FileImageStorage
        var moving: FallbackImageStorage { FallbackImageStorage(primary: new, fallback: old) }

        init(_ kind: StoreUnderTest) async throws {
            new = try await kind.make()
            old = FileImageStorage(root: temporaryPath("fallback-old"))
        }
    }

    let user = try! StorageID("u1")
    func render(_ id: String) throws -> StorageKey { .render(user: user, render: try StorageID(id)) }

    @Test(arguments: StoreUnderTest.allCases)
    func aMissInTheNewStoreIsServedByTheOldOneAndNeverCopiedThere(_ kind: StoreUnderTest) async throws {
        let stores = try await Stores(kind)
        let key = StorageKey.bodyPhoto(user: user, photo: try StorageID("b1"))
        let data = ImageStorageContractTests.bytes(5000)
        try await stores.old.write(data, to: key)

        #expect(try await stores.moving.size(of: key) == data.count)
        #expect(try await stores.moving.info(of: key).size == data.count)
        #expect(try await stores.moving.read(key, maxBytes: 10_000) == data)
        #expect(try await stores.moving.withFileForReading(key, maxBytes: 10_000) { try Data(contentsOf: URL(fileURLWithPath: $0)) } == data)
        await #expect(throws: StorageError.tooLarge(key.relativePath, bytes: 5000, limit: 100)) { try await stores.moving.read(key, maxBytes: 100) }
        #expect(try await !stores.new.holds(key), "a read through the fallback writes nothing")
        await #expect(throws: StorageError.notFound("u1/renders/none.jpg")) { try await stores.moving.read(try render("none"), maxBytes: 100) }

        // A file the body itself cannot find is the body's error, not a miss to retry elsewhere.
        let newer = ImageStorageContractTests.bytes(10)
        try await stores.new.write(newer, to: key)
        #expect(try await stores.moving.read(key, maxBytes: 10_000) == newer, "the new store's object wins")
        var calls = 0
        await #expect(throws: StorageError.notFound("inner")) {
            try await stores.moving.withFileForReading(key, maxBytes: 10_000) { _ in
                calls += 1
                throw StorageError.notFound("inner")
            }
        }
        #expect(calls == 1)
    }

    @Test(arguments: StoreUnderTest.allCases)
    func aWriteNeverReachesTheOldStoreAndAConditionalOneCountsIt(_ kind: StoreUnderTest) async throws {
        let stores = try await Stores(kind)
        let written = try render("r1")
        try await stores.moving.write(ImageStorageContractTests.bytes(100), to: written)
        #expect(try await stores.new.holds(written))
        #expect(try await !stores.old.holds(written))
        try await stores.moving.create(ImageStorageContractTests.bytes(100), at: try render("r2"))
        #expect(try await stores.new.holds(try render("r2")))
        #expect(try await !stores.old.holds(try render("r2")))

        let storedBefore = try render("r3")
        let original = ImageStorageContractTests.bytes(100)
        try await stores.old.write(original, to: storedBefore)
        await #expect(throws: StorageError.alreadyExists(storedBefore.relativePath)) {
            try await stores.moving.create(ImageStorageContractTests.bytes(200), at: storedBefore)
        }
        #expect(try await !stores.new.holds(storedBefore))
        #expect(try await stores.moving.read(storedBefore, maxBytes: 1000) == original)
        #expect(try await StoreListing.paths(of: stores.old) == [storedBefore.relativePath], "nothing else reached the old store")
    }

    @Test(arguments: StoreUnderTest.allCases)
    func aPurgeAndADeleteEmptyBothStores(_ kind: StoreUnderTest) async throws {
        let stores = try await Stores(kind)
        let other = StorageKey.render(user: try StorageID("u2"), render: try StorageID("kept"))
        try await stores.old.write(Data("old".utf8), to: other)
        try await stores.new.write(Data("new".utf8), to: other)
        for index in 0..<30 {
            let key = try render("r\(index)")
            if index % 3 != 1 { try await stores.old.write(Data("old \(index)".utf8), to: key) }  // not copied yet, or copied
            if index % 3 != 0 { try await stores.new.write(Data("new \(index)".utf8), to: key) }  // copied, or written since
        }
        let single = try render("r4")
        try await stores.moving.delete(single)
        #expect(try await !stores.old.holds(single))
        #expect(try await !stores.new.holds(single))

        #expect(try await stores.moving.deleteAll(of: user) == 20 + 19, "each store's objects (r4, in the new store only, deleted before)")
        #expect(try await StoreListing.paths(of: stores.old) == [other.relativePath])
        #expect(try await StoreListing.paths(of: stores.new) == [other.relativePath])
    }
}

enum StoreListing {
    /// Every relative path the store lists.
    static func paths(of storage: any ImageStorage) async throws -> [String] {
        try await ImageStorageContractTests.listAll(storage).map(\.key.relativePath)
    }
}
