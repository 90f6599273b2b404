import FleetPostgres
import FleetQueue
import FleetStorage
import Imaging

extension JobErrorCode {
    /// A render's body photo or garment is not stored and no job is making it yet (its request
    /// may have committed before the one that makes it): deferred, its attempt not counted.
    public static let renderInputNotReady = Self(rawValue: "RENDER_INPUT_NOT_READY")
}

/// Whether a render's photos are ready when its job is about to start it, whatever order the
/// requests making them committed in (`docs/renders.md`, "Inputs"). The request enqueued the
/// render after the jobs it found making its photos, but a `garment.process` or `image.normalize`
/// sent beside it (pipelined, or from another backend) may commit after the render's request:
/// the render then finds those jobs here, and waits for them rather than sending a garment whose
/// cut-out is being made, or failing on a photo not written yet.
struct RenderInputCheck: Sendable {
    /// What the render sends as its garment, or why it cannot start yet.
    enum Verdict: Sendable {
        case ready(RenderAttempt.GarmentSource)
        case notReady(JobDeferral)
    }

    /// How long a render whose photo nobody is making yet waits before it looks again.
    static let lookAgainIn = Duration.milliseconds(500)

    let queue: JobQueue
    let storage: any ImageStorage

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
        let owner = try StorageID(render.ownerID)
        let body = try StorageID(render.bodyPhotoID), garment = try StorageID(render.garmentID)
        let makers = try Self.makers(of: render)
        if !makersLookedFor, let wait = Self.waiting(for: try await queue.pendingJobs(matching: makers)) { return .notReady(wait) }
        var files = try await StoredInputs.look(storage, owner: owner, body: body, garment: garment)
        if !files.complete(cutoutMade: cutoutMade) {
            if let wait = Self.waiting(for: try await queue.pendingJobs(matching: makers)) { return .notReady(wait) }
            files = try await StoredInputs.look(storage, owner: owner, body: body, garment: garment, alreadySeen: files)
        }
        let source: RenderAttempt.GarmentSource = cutoutMade != false && files.cutout ? .cutout : .photo
        let missing = [files.body ? nil : "body photo", source == .photo && !files.garment ? "garment" : nil].compactMap { $0 }
        guard missing.isEmpty else {
            return .notReady(.retryIn(
                Self.lookAgainIn, code: .renderInputNotReady, reason: "no \(missing.joined(separator: " and ")) stored, and no job making it yet"))
        }
        return .ready(source)
    }

    /// The first look for the jobs making the render's photos, in the transaction that starts it
    /// (`RenderStore.start`): the deferral that waits for them, or nil when none is pending.
    static func makersPending(for render: RenderRecord, on connection: PostgresConnection) async throws -> JobDeferral? {
        waiting(for: try await JobQueue.pendingJobs(matching: try makers(of: render), in: connection))
    }

    private static func makers(of render: RenderRecord) throws -> [JobMatch] {
        try RenderInputs.makers(
            owner: try StorageID(render.ownerID), bodyPhotoID: try StorageID(render.bodyPhotoID), garmentID: try StorageID(render.garmentID))
    }

    private static func waiting(for pending: [JobDependency]) -> JobDeferral? {
        guard !pending.isEmpty else { return nil }
        let kinds = Set(pending.map(\.kind.rawValue)).sorted().joined(separator: ", ")
        return .runAfter(jobs: pending.map(\.id), reason: "jobs making its photos are not done (\(kinds))")
    }
}

/// Which of a render's photos are stored.
struct StoredInputs: Sendable {
    var body: Bool
    var garment: Bool
    var cutout: Bool

    static let noneSeen = Self(body: false, garment: false, cutout: false)

    /// The looks go out together: with a bucket each is a round trip, and the order that matters
    /// is the jobs' look against the files' look, not one file's against another's. A photo in
    /// `alreadySeen` is not asked for again: a stored photo stays stored (only an account purge
    /// removes it, and the render's read then fails as it would after any look).
    static func look(
        _ storage: any ImageStorage, owner: StorageID, body: StorageID, garment: StorageID, alreadySeen: Self = noneSeen
    ) async throws -> Self {
        async let bodyHeld = holds(.bodyPhoto(user: owner, photo: body), in: storage, seen: alreadySeen.body)
        async let garmentHeld = holds(.garment(user: owner, garment: garment), in: storage, seen: alreadySeen.garment)
        async let cutoutHeld = holds(.garmentCutout(user: owner, garment: garment), in: storage, seen: alreadySeen.cutout)
        return Self(body: try await bodyHeld, garment: try await garmentHeld, cutout: try await cutoutHeld)
    }

    private static func holds(_ key: StorageKey, in storage: any ImageStorage, seen: Bool) async throws -> Bool {
        if seen { return true }
        return try await storage.holds(key)
    }

    /// Everything the render would send is there: the body photo, and the garment's cut-out, or
    /// its photo when the cut-out job it ran after said none could be made.
    func complete(cutoutMade: Bool?) -> Bool { body && (cutoutMade == false ? garment : cutout) }
}
