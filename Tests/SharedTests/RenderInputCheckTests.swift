import FleetQueue
import FleetStorage
import Foundation
@testable import Imaging
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
        guard case .ready(.cutout) = try await check.verdict(for: render, cutoutMade: nil, makersLookedFor: false) else {
            Issue.record("a stored cut-out was not sent")
            return
        }
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
        guard case .ready(.photo) = try await check.verdict(for: render, cutoutMade: nil, makersLookedFor: false) else {
            Issue.record("a garment without a cut-out was not sent as its photo")
            return
        }
    }

    /// A garment without a cut-out is looked for twice (the cut-out may be being made), but the
    /// second look asks only for what the first did not find: 4 looks at the store, not 6 (with a
    /// bucket, each a HEAD).
    @Test func theSecondLookAsksOnlyForWhatTheFirstDidNotFind() async throws {
        let f = try await RenderFixture.make()
        try await f.grant("u1", credits: 1)
        try await f.storage.write(RenderFixture.bodyPhoto, to: .garment(user: StorageID("u1"), garment: StorageID("g2")))
        let looks = KeysLookedAt()
        let storage = ObservedImageStorage(base: f.storage, beforeSize: { key in looks.keys.withLock { $0.append(key.relativePath) } })
        let check = RenderInputCheck(queue: f.q.queue, storage: storage)
        let render = try await f.requests.request(RenderRequest(
            renderID: StorageID("r3"), requester: .user("u1"), ownerID: StorageID("u1"), garmentID: StorageID("g2"),
            bodyPhotoID: StorageID("b1"), category: .tops))
        guard case .ready(.photo) = try await check.verdict(for: render, cutoutMade: nil, makersLookedFor: false) else {
            Issue.record("a garment without a cut-out was not sent as its photo")
            return
        }
        // The looks go out together: in any order.
        #expect(looks.keys.withLock { $0.sorted() } == ["u1/body/b1.jpg", "u1/garments/g2.jpg", "u1/garments/g2_cutout.png", "u1/garments/g2_cutout.png"].sorted())
    }
}

/// The keys a store was asked about, from the store's concurrent calls.
final class KeysLookedAt: Sendable {
    let keys = Mutex<[String]>([])
}
