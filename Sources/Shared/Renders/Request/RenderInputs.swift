import FleetPostgres
import FleetQueue
import FleetStorage
import Imaging

/// The uploads a render's photos are still to be made from. A render request that carries them
/// is valid as soon as the uploads exist: the request enqueues the body photo's normalisation,
/// the garment's normalisation and then its cut-out, in the transaction that creates the render,
/// and the render's job runs after them (`docs/renders.md`, "Inputs").
public struct RenderUploads: Sendable, Equatable {
    /// The upload the body photo (`bodyPhotoID`) is normalised from; nil: the photo exists.
    public var bodyUploadID: StorageID?
    /// The upload the garment (`garmentID`) is normalised and cut out from; nil: the garment exists.
    public var garmentUploadID: StorageID?

    public init(bodyUploadID: StorageID? = nil, garmentUploadID: StorageID? = nil) {
        self.bodyUploadID = bodyUploadID
        self.garmentUploadID = garmentUploadID
    }

    public var isEmpty: Bool { bodyUploadID == nil && garmentUploadID == nil }
}

/// The jobs a render's photos are made by, which its job runs after, and how long they are
/// expected to take: those its request enqueues from its uploads, and those still making the
/// photos it names by id (a `garment.process` sent just before, say).
struct RenderInputs: Sendable {
    /// What the render job runs after.
    struct Enqueued: Sendable, Equatable {
        var jobIDs: [Int64] = []
        /// The garment's cut-out, whose result says whether there is one to use.
        var cutoutJobID: Int64?
        /// The kinds of the jobs found still making photos named by id.
        var pendingKinds: Set<JobKind> = []
    }

    /// The kinds whose run times the wait is estimated from.
    static let kinds: [JobKind] = [.imageNormalize, .garmentCutout]

    /// The kinds a render with `uploads` runs: its own, and its uploads' normalisations and cut-out.
    static func kinds(runBy uploads: RenderUploads) -> Set<JobKind> {
        var kinds: Set<JobKind> = [.renderRun]
        if !uploads.isEmpty { kinds.insert(.imageNormalize) }
        if uploads.garmentUploadID != nil { kinds.insert(.garmentCutout) }
        return kinds
    }

    /// A run time before any is on record: a normalisation is libvips on one photo; a cut-out
    /// goes to a remote model (Replicate answers in a few seconds) before the local fallback.
    static func assumedRunTime(_ kind: JobKind) -> Duration {
        kind == .garmentCutout ? .seconds(3) : .seconds(1)
    }

    /// How long after the request the render's inputs should be ready: the body photo and the
    /// garment are made side by side, the garment's cut-out after its normalisation. `runTimes`:
    /// the kinds' recent run times (`JobQueue.recentRunTimes`).
    static func expectedWait(for uploads: RenderUploads, runTimes: [JobKind: Duration]) -> Duration {
        func runTime(_ kind: JobKind) -> Duration { runTimes[kind] ?? assumedRunTime(kind) }
        let body = uploads.bodyUploadID == nil ? Duration.zero : runTime(.imageNormalize)
        let garment = uploads.garmentUploadID == nil ? Duration.zero : runTime(.imageNormalize) + runTime(.garmentCutout)
        return max(body, garment)
    }

    /// How long the jobs found still making the photos named by id should take: a normalisation
    /// (the body photo's and the garment's run side by side) and then a cut-out, of those pending.
    static func expectedWait(pending kinds: Set<JobKind>, runTimes: [JobKind: Duration]) -> Duration {
        kinds.filter(Self.kinds.contains).reduce(Duration.zero) { $0 + (runTimes[$1] ?? assumedRunTime($1)) }
    }

    /// What the render's job runs after, in the caller's transaction: the input jobs enqueued for
    /// its uploads, the jobs still making the photos it names by id (`pending`), and the jobs the
    /// caller named (`RenderRequest.after`).
    static func prepare(for request: RenderRequest, on connection: PostgresConnection) async throws -> Enqueued {
        var inputs = try await enqueue(for: request, on: connection)
        let pending = try await pending(for: request, on: connection)
        inputs.jobIDs += pending.map(\.id) + request.after
        inputs.cutoutJobID = inputs.cutoutJobID ?? pending.last { $0.kind == .garmentCutout }?.id
        inputs.pendingKinds = Set(pending.map(\.kind))
        return inputs
    }

    /// The image jobs not ended yet (waiting, available or running) that make the photos `request`
    /// names by id rather than by upload, whoever enqueued them: the garment's normalisations and
    /// cut-outs, the body photo's normalisations. Run after, they cannot be read half made: the
    /// render never sends a garment whose cut-out is pending or running, nor reads a photo not
    /// written yet.
    static func pending(for request: RenderRequest, on connection: PostgresConnection) async throws -> [JobDependency] {
        let matches = try makers(
            owner: request.ownerID, bodyPhotoID: request.uploads.bodyUploadID == nil ? request.bodyPhotoID : nil,
            garmentID: request.uploads.garmentUploadID == nil ? request.garmentID : nil)
        return try await JobQueue.pendingJobs(matching: matches, in: connection)
    }

    /// What finds the jobs making a render's photos: the body photo's normalisations, the
    /// garment's normalisations and cut-outs (nil: that photo is not sought).
    static func makers(owner: StorageID, bodyPhotoID: StorageID?, garmentID: StorageID?) throws -> [JobMatch] {
        var matches: [JobMatch] = []
        if let bodyPhotoID { matches.append(try NormalizeImagePayload.making(.body, bodyPhotoID, of: owner)) }
        if let garmentID {
            matches.append(try NormalizeImagePayload.making(.garment, garmentID, of: owner))
            matches.append(try GarmentCutoutPayload.cuttingOut(garmentID, of: owner))
        }
        return matches
    }

    /// Enqueues the input jobs of `request` in the caller's transaction (no wake-up: the caller
    /// sends it after its commit). Keyed by the render, like its own job. The cut-out completes
    /// without a cut-out when every backend fails (`completeWithoutCutout`): the render then
    /// uses the normalised photo and says so, rather than being cancelled with it.
    static func enqueue(for request: RenderRequest, on connection: PostgresConnection) async throws -> Enqueued {
        var enqueued = Enqueued()
        let owner = request.ownerID
        let key = "render:\(request.renderID.value)"
        var photos: [NewJob] = []
        if let upload = request.uploads.bodyUploadID {
            photos.append(try NewJob(
                NormalizeImagePayload(userID: owner, uploadID: upload, target: .body, imageID: request.bodyPhotoID),
                priority: 1, idempotencyKey: "\(key):body"))
        }
        if let upload = request.uploads.garmentUploadID {
            photos.append(try NewJob(
                NormalizeImagePayload(userID: owner, uploadID: upload, target: .garment, imageID: request.garmentID),
                priority: 1, idempotencyKey: "\(key):garment"))
        }
        guard !photos.isEmpty else { return enqueued }
        let made = try await JobQueue.enqueue(photos, announce: false, in: connection)
        enqueued.jobIDs = made.map(\.id)
        if request.uploads.garmentUploadID != nil, let garment = made.last {
            var cutout = try NewJob(
                GarmentCutoutPayload(userID: owner, garmentID: request.garmentID, completeWithoutCutout: true),
                priority: 1, idempotencyKey: "\(key):cutout")
            cutout.after = [garment.id]
            let id = try await JobQueue.enqueue([cutout], announce: false, in: connection)[0].id
            enqueued.jobIDs.append(id)
            enqueued.cutoutJobID = id
        }
        return enqueued
    }
}
