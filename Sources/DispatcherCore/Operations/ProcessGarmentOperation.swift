import Shared

/// `garment.process`: normalise a garment upload, then remove its background. Until the queue has
/// a cutout kind this is one `image.normalize` job flagged `thenCutout`, which the cutout step
/// will act on.
public struct ProcessGarmentOperation: DispatcherOperation {
    let submitter: JobSubmitter

    public init(queue: JobQueue) { submitter = JobSubmitter(queue: queue) }

    public func run(_ request: ProcessGarmentRequest) async throws -> EnqueuedJobResult {
        let payload = NormalizeImagePayload(
            userId: try storageID(request.userId, field: "userId"), uploadId: try storageID(request.uploadId, field: "uploadId"),
            target: .garment, imageId: try storageID(request.garmentId, field: "garmentId"), thenCutout: true)
        return try await submitter.submit(kind: .imageNormalize, payload: payload, options: request.options)
    }
}
