import DispatcherProtocol
import FleetCallbacks
import FleetQueue
import Imaging

/// `garment.process`: normalise a garment upload, then remove its background: the
/// `image.normalize` job and the `garment.cutout` job after it, enqueued together as one graph
/// (one transaction, all or none), and both answered. From the commit on, the queue knows the
/// cut-out is pending, so a render of the garment requested at once runs after it
/// (`RenderInputs.pending`) instead of reading a photo not cut out yet.
///
/// The options apply to both jobs but for three: `delaySeconds` and `after` to the normalisation
/// (the cut-out waits for it anyway), `callbackUrl` to the cut-out, whose end is the garment's
/// (it ends `cancelled`, `DEPENDENCY_FAILED`, when the normalisation fails). `idempotencyKey`
/// covers the graph: the jobs get `<key>/normalize` and `<key>/cutout`.
public struct ProcessGarmentOperation: DispatcherOperation {
    public var access: OperationAccess { .submitters }
    let submitter: JobSubmitter
    /// A graph is one statement and one commit of its own, never batched with other requests.
    let queue: JobQueue

    public init(queue: JobQueue, outbound: OutboundSettings = .off) {
        self.queue = queue
        submitter = JobSubmitter(enqueuer: queue, outbound: outbound)
    }

    public func run(_ request: ProcessGarmentRequest) async throws -> ProcessGarmentRequest.Result {
        let userID = try storageID(request.userId, field: "userId")
        let garmentID = try storageID(request.garmentId, field: "garmentId")
        let normalizePayload = NormalizeImagePayload(
            userID: userID, uploadID: try storageID(request.uploadId, field: "uploadId"), target: .garment, imageID: garmentID)
        var normalize = try submitter.job(kind: .imageNormalize, payload: normalizePayload, options: request.options, field: "args")
        var cutout = try NewJob(
            GarmentCutoutPayload(userID: userID, garmentID: garmentID),
            queue: normalize.queue, priority: normalize.priority, maxAttempts: normalize.maxAttempts, limitKeys: normalize.limitKeys)
        (cutout.callbackURL, normalize.callbackURL) = (normalize.callbackURL, nil)
        let key = normalize.idempotencyKey
        normalize.idempotencyKey = nil
        let graph = try JobGraph([
            JobGraph.Node(name: "normalize", job: normalize),
            JobGraph.Node(name: "cutout", job: cutout, runsAfter: ["normalize"]),
        ], idempotencyKey: key)
        let enqueued = try await queue.enqueue(graph)
        return .init(jobId: enqueued[0].id, kind: JobKind.imageNormalize.rawValue, isNew: enqueued[0].isNew, cutoutJobId: enqueued[1].id)
    }
}
