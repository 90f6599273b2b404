import FleetQueue
import FleetStorage
@testable import FleetTestSupport
import Foundation
@testable import Imaging
@testable import Providers
@testable import Renders
import Synchronization
import Testing

/// `RenderInputCheck`, the render handler's look at its photos before it starts a render: what
/// it sends, and when it defers the render's job instead.
@Suite struct RenderInputCheckTests {
    @Test func aRenderWaitsForTheJobsMakingItsPhotosAndSendsTheCutoutOnceStored() async throws {
        let f = try await RenderFixture.make()
        try await f.grant("u1", credits: 2)
        let check = RenderInputCheck(queue: f.q.queue, storage: f.storage)
        let render = try await f.request("r1")
        // The fixture stores u1's body photo and g1's cut-out: nothing is being made.
        guard case .ready(let photos) = try await check.verdict(for: render, cutoutMade: nil, makersLookedFor: false), photos.source == .cutout else {
            Issue.record("a stored cut-out was not sent")
            return
        }
        #expect(photos.garment.mimeType == "image/png")
        #expect(photos.garment.bytes == (try await f.storage.read(.garmentCutout(user: StorageID("u1"), garment: StorageID("g1")), maxBytes: 1 << 24)))
        // A cut-out of g1 still queued (a `garment.process` that committed after the request): wait for it.
        let cutout = try await f.q.queue.enqueue(try NewJob(GarmentCutoutPayload(userID: StorageID("u1"), garmentID: StorageID("g1"))))
        guard case .notReady(.runAfter(let jobs, _)) = try await check.verdict(for: render, cutoutMade: nil, makersLookedFor: false) else {
            Issue.record("a render started while its garment's cut-out was queued")
            return
        }
        #expect(jobs == [cutout.id])
    }

    @Test func aPhotoNobodyIsMakingYetDefersTheRenderAndAGarmentWithoutCutoutSendsItsPhoto() async throws {
        let f = try await RenderFixture.make()
        try await f.grant("u1", credits: 2)
        let check = RenderInputCheck(queue: f.q.queue, storage: f.storage)
        let render = try await f.requests.request(RenderRequest(
            renderID: StorageID("r2"), requester: .user("u1"), ownerID: StorageID("u1"), garmentID: StorageID("g2"),
            bodyPhotoID: StorageID("b1"), category: .tops))
        // Neither g2's photo nor its cut-out is stored, and no job makes them (yet).
        guard case .notReady(.retryIn(let delay, let code, _)) = try await check.verdict(for: render, cutoutMade: nil, makersLookedFor: false) else {
            Issue.record("a render without its garment was not deferred")
            return
        }
        #expect(delay == RenderInputCheck.lookAgainIn && code == .renderInputNotReady)
        // The photo made, no cut-out and nothing making one: the photo is sent.
        try await f.storage.write(RenderFixture.bodyPhoto, to: .garment(user: StorageID("u1"), garment: StorageID("g2")))
        guard case .ready(let photos) = try await check.verdict(for: render, cutoutMade: nil, makersLookedFor: false), photos.source == .photo else {
            Issue.record("a garment without a cut-out was not sent as its photo")
            return
        }
        #expect(photos.garment == TryOnImage(bytes: RenderFixture.bodyPhoto))
    }

    /// The look is the read: a render whose photos are stored reads each once, the garment's photo
    /// not at all when its cut-out is there (with a bucket, one round of GETs and no HEAD).
    @Test func aRenderWithItsCutoutReadsEachPhotoItSendsOnceAndNothingElse() async throws {
        let f = try await RenderFixture.make()
        try await f.grant("u1", credits: 1)
        let reads = KeysLookedAt()
        let storage = ObservedImageStorage(base: f.storage, beforeRead: { key in reads.keys.withLock { $0.append(key.relativePath) } })
        let check = RenderInputCheck(queue: f.q.queue, storage: storage)
        let render = try await f.request("r1")
        guard case .ready(let photos) = try await check.verdict(for: render, cutoutMade: nil, makersLookedFor: false), photos.source == .cutout else {
            Issue.record("a stored cut-out was not sent")
            return
        }
        #expect(reads.keys.withLock { $0.sorted() } == ["u1/body/b1.jpg", "u1/garments/g1_cutout.png"])
    }

    /// A garment without a cut-out is looked for twice (the cut-out may be being made), but the
    /// second look asks only for what the first did not find: 4 reads, not 6.
    @Test func theSecondLookAsksOnlyForWhatTheFirstDidNotFind() async throws {
        let f = try await RenderFixture.make()
        try await f.grant("u1", credits: 1)
        try await f.storage.write(RenderFixture.bodyPhoto, to: .garment(user: StorageID("u1"), garment: StorageID("g2")))
        let reads = KeysLookedAt()
        let storage = ObservedImageStorage(base: f.storage, beforeRead: { key in reads.keys.withLock { $0.append(key.relativePath) } })
        let check = RenderInputCheck(queue: f.q.queue, storage: storage)
        let render = try await f.requests.request(RenderRequest(
            renderID: StorageID("r3"), requester: .user("u1"), ownerID: StorageID("u1"), garmentID: StorageID("g2"),
            bodyPhotoID: StorageID("b1"), category: .tops))
        guard case .ready(let photos) = try await check.verdict(for: render, cutoutMade: nil, makersLookedFor: false), photos.source == .photo else {
            Issue.record("a garment without a cut-out was not sent as its photo")
            return
        }
        // The reads of a look go out together: in any order.
        #expect(reads.keys.withLock { $0.sorted() } == ["u1/body/b1.jpg", "u1/garments/g2.jpg", "u1/garments/g2_cutout.png", "u1/garments/g2_cutout.png"].sorted())
    }
}

/// The keys a store was asked about, from the store's concurrent calls.
final class KeysLookedAt: Sendable {
    let keys = Mutex<[String]>([])
}
