import FleetCallbacks
import DispatcherProtocol
import FleetQueue
import Imaging

/// `account.purge`: every file of one user deleted by the image worker.
public struct PurgeAccountOperation: DispatcherOperation {
    public var access: OperationAccess { .submitters }
    let submitter: JobSubmitter

    public init(enqueuer: any JobEnqueuer, outbound: OutboundSettings = .off) { submitter = JobSubmitter(enqueuer: enqueuer, outbound: outbound) }

    public func run(_ request: PurgeAccountRequest) async throws -> EnqueuedJobResult {
        let payload = PurgeAccountPayload(userID: try storageID(request.userId, field: "userId"))
        return try await submitter.submit(kind: .accountPurge, payload: payload, options: request.options)
    }
}
