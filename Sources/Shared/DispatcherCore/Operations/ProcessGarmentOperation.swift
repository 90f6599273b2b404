import FleetCallbacks
import DispatcherProtocol
import FleetQueue
import Imaging

/// `garment.process`: normalise a garment upload, then remove its background: one
/// `image.normalize` job flagged `thenCutout`, which on success enqueues the `garment.cutout`
/// job (keyed by the normalise job, so a retried normalise does not cut out twice). The
/// answer is the normalise job; its result names the cutout job (`cutoutJobId`).
public struct ProcessGarmentOperation: DispatcherOperation {
    public var access: OperationAccess { .submitters }
    let submitter: JobSubmitter

    public init(enqueuer: any JobEnqueuer, outbound: OutboundSettings = .off) { submitter = JobSubmitter(enqueuer: enqueuer, outbound: outbound) }

    public func run(_ request: ProcessGarmentRequest) async throws -> EnqueuedJobResult {
        let payload = NormalizeImagePayload(
            userId: try storageID(request.userId, field: "userId"), uploadId: try storageID(request.uploadId, field: "uploadId"),
            target: .garment, imageId: try storageID(request.garmentId, field: "garmentId"), thenCutout: true)
        return try await submitter.submit(kind: .imageNormalize, payload: payload, options: request.options)
    }
}
