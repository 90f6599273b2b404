import DispatcherProtocol
import FleetQueue
import Imaging

/// `image.normalize`: an upload normalised into a body photo or a garment photo by the image worker.
public struct NormalizeImageOperation: DispatcherOperation {
    public var access: OperationAccess { .submitters }
    let submitter: JobSubmitter

    public init(queue: JobQueue) { submitter = JobSubmitter(queue: queue) }

    public func run(_ request: NormalizeImageRequest) async throws -> EnqueuedJobResult {
        let payload = NormalizeImagePayload(
            userId: try storageID(request.userId, field: "userId"), uploadId: try storageID(request.uploadId, field: "uploadId"),
            target: request.target == .body ? .body : .garment, imageId: try storageID(request.imageId, field: "imageId"))
        return try await submitter.submit(kind: .imageNormalize, payload: payload, options: request.options)
    }
}
