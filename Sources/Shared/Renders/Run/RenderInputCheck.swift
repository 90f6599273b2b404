import FleetPostgres
import FleetQueue
import FleetStorage
import FleetSupport
import Foundation
import Imaging
import Providers

extension JobErrorCode {
    /// A render's body photo or garment is not stored and no job is making it yet (its request
    /// may have committed before the one that makes it): deferred, its attempt not counted.
    public static let renderInputNotReady = Self(rawValue: "RENDER_INPUT_NOT_READY")
}

/// Whether a render's photos are ready when its job is about to start it, whatever order the
/// requests making them committed in (`docs/renders.md`, "Inputs"), and their bytes when they
/// are: the look is the read (a missing photo is a read that finds nothing), so with a bucket a
/// render's photos cost one round trip of GETs, not a round of HEADs and then one of GETs. The
/// request enqueued the render after the jobs it found making its photos, but a
/// `garment.process` or `image.normalize` sent beside it (pipelined, or from another backend) may
/// commit after the render's request: the render then finds those jobs here, and waits for them
/// rather than sending a garment whose cut-out is being made, or failing on a photo not written yet.
struct RenderInputCheck: Sendable {
    /// What the render sends, or why it cannot start yet.
    enum Verdict: Sendable {
        case ready(RenderPhotos)
        case notReady(JobDeferral)
    }

    /// How long a render whose photo nobody is making yet waits before it looks again.
    static let lookAgainIn = Duration.milliseconds(500)

    let queue: JobQueue
    let storage: any ImageStorage
    /// A store refusing reads for an outage defers the render's job, its attempt unspent.
    var outage = StorageOutage()

    /// `cutoutMade`: what the cut-out job the render ran after said (`RenderRunPayload.cutoutJobID`;
    /// false: none could be made, the photo is sent), nil when it ran after none.
    /// `makersLookedFor`: the jobs were already looked for (`makersPending`, in the render's
    /// start) and none was pending.
    ///
    /// The jobs are looked for before the files and, when a file is missing, once more after them:
    /// a job that writes a photo was committed before it wrote it (with the garment's cut-out
    /// job, which `garment.process` enqueues in the same transaction), so a photo seen without
    /// its cut-out is either seen with its cut-out job pending by the second look, or that job
    /// completed, having written the cut-out first, which the files' second look then sees.
    func verdict(for render: RenderRecord, cutoutMade: Bool?, makersLookedFor: Bool) async throws -> Verdict {
        let keys = InputKeys(render)
        let makers = try Self.makers(of: render)
        if !makersLookedFor, let wait = Self.waiting(for: try await queue.pendingJobs(matching: makers)) { return .notReady(wait) }
        // The garment's photo is read only when it is what the render would send: with a cut-out
        // expected, only once the first look found none.
        var found = try await StoredInputs.read(keys, wanting: cutoutMade == false ? [.body, .garment] : [.body, .cutout], with: read)
        if !found.complete(cutoutMade: cutoutMade) {
            if let wait = Self.waiting(for: try await queue.pendingJobs(matching: makers)) { return .notReady(wait) }
            found = try await StoredInputs.read(
                keys, wanting: cutoutMade == false ? [.body, .garment] : [.body, .garment, .cutout], with: read, alreadyFound: found)
        }
        let cutout = cutoutMade != false ? found.cutout : nil
        let garment = cutout ?? found.garment
        guard let body = found.body, let garment else {
            let missing = [found.body == nil ? "body photo" : nil, garment == nil ? "garment" : nil].compactMap { $0 }
            return .notReady(.retryIn(
                Self.lookAgainIn, code: .renderInputNotReady, reason: "no \(missing.joined(separator: " and ")) stored, and no job making it yet"))
        }
        return .ready(RenderPhotos(body: body, garment: garment, source: cutout == nil ? .photo : .cutout))
    }

    /// One photo's bytes, nil when none is stored.
    private func read(_ key: StorageKey) async throws -> Data? {
        do {
            return try await RenderPhotos.read(key, from: storage, outage: outage)
        } catch StorageError.notFound {
            return nil
        }
    }

    /// The first look for the jobs making the render's photos, in the transaction that starts it
    /// (`RenderStore.start`): the deferral that waits for them, or nil when none is pending.
    static func makersPending(for render: RenderRecord, on connection: PostgresConnection) async throws -> JobDeferral? {
        waiting(for: try await JobQueue.pendingJobs(matching: try makers(of: render), in: connection))
    }

    private static func makers(of render: RenderRecord) throws -> [JobMatch] {
        try RenderInputs.makers(
            owner: render.ownerID, bodyPhotoID: render.bodyPhotoID, garmentID: render.garmentID)
    }

    private static func waiting(for pending: [JobDependency]) -> JobDeferral? {
        guard !pending.isEmpty else { return nil }
        let kinds = Set(pending.map(\.kind.rawValue)).sorted().joined(separator: ", ")
        return .runAfter(jobs: pending.map(\.id), reason: "jobs making its photos are not done (\(kinds))")
    }
}

/// What a render sends the provider, read by its input check (and again by a second submission).
struct RenderPhotos: Sendable {
    let person: TryOnImage
    let garment: TryOnImage
    let source: RenderAttempt.GarmentSource

    /// The garment is sent as stored: its cut-out a PNG, its normalised photo a JPEG.
    init(body: Data, garment: Data, source: RenderAttempt.GarmentSource) {
        person = TryOnImage(bytes: body)
        self.garment = source == .cutout ? TryOnImage(bytes: garment, mimeType: "image/png") : TryOnImage(bytes: garment)
        self.source = source
    }

    /// `render`'s photos of `source` read again (both reads go out together: with a bucket each
    /// is a round trip); a photo gone since the check fails the read.
    static func read(for render: RenderRecord, source: RenderAttempt.GarmentSource, from storage: any ImageStorage, outage: StorageOutage) async throws -> Self {
        let keys = InputKeys(render)
        async let body = read(keys.body, from: storage, outage: outage)
        async let garment = read(source == .cutout ? keys.cutout : keys.garment, from: storage, outage: outage)
        return Self(body: try await body, garment: try await garment, source: source)
    }

    /// One photo's bytes, at most an upload's size; a store refusing reads for an outage defers
    /// the render's job, its attempt unspent.
    static func read(_ key: StorageKey, from storage: any ImageStorage, outage: StorageOutage) async throws -> Data {
        try await outage.deferringOutages(.read) { try await storage.read(key, maxBytes: ImageLimits().maxBytes) }
    }
}

/// The storage keys of a render's photos.
struct InputKeys: Sendable {
    let body: StorageKey
    let garment: StorageKey
    let cutout: StorageKey

    init(_ render: RenderRecord) {
        body = .bodyPhoto(user: render.ownerID, photo: render.bodyPhotoID)
        garment = .garment(user: render.ownerID, garment: render.garmentID)
        cutout = .garmentCutout(user: render.ownerID, garment: render.garmentID)
    }
}

/// Which of a render's photos were found stored, with their bytes.
struct StoredInputs: Sendable {
    enum Photo: Sendable { case body, garment, cutout }

    var body: Data?
    var garment: Data?
    var cutout: Data?

    /// The reads go out together: with a bucket each is a round trip, and the order that matters
    /// is the jobs' look against the files' look, not one file's against another's. A photo in
    /// `alreadyFound` is not read again: a stored photo stays stored (only an account purge
    /// removes it, and the render then fails as it would after any look).
    static func read(
        _ keys: InputKeys, wanting wanted: Set<Photo>, with read: @Sendable (StorageKey) async throws -> Data?, alreadyFound: Self = Self()
    ) async throws -> Self {
        func maybe(_ photo: Photo, _ known: Data?, _ key: StorageKey) async throws -> Data? {
            guard known == nil, wanted.contains(photo) else { return known }
            return try await read(key)
        }
        async let body = maybe(.body, alreadyFound.body, keys.body)
        async let garment = maybe(.garment, alreadyFound.garment, keys.garment)
        async let cutout = maybe(.cutout, alreadyFound.cutout, keys.cutout)
        return Self(body: try await body, garment: try await garment, cutout: try await cutout)
    }

    /// Everything the render would send is there: the body photo, and the garment's cut-out, or
    /// its photo when the cut-out job it ran after said none could be made.
    func complete(cutoutMade: Bool?) -> Bool { body != nil && (cutoutMade == false ? garment != nil : cutout != nil) }
}
