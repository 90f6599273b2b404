import DispatcherProtocol
import FleetQueue

/// `cancel`: a queued job ends `cancelled`; a running one's worker is told to stop.
public struct CancelOperation: DispatcherOperation {
    public var access: OperationAccess { .submitters }
    let queue: JobQueue

    public init(queue: JobQueue) { self.queue = queue }

    public func run(_ request: CancelRequest) async throws -> CancelRequest.Result {
        switch try await queue.cancel(id: request.jobId) {
        case .cancelled: CancelRequest.Result(outcome: .cancelled, state: .cancelled, workerId: nil)
        case .requested(let owner): CancelRequest.Result(outcome: .requested, state: .running, workerId: owner)
        case .alreadyFinished(let state): CancelRequest.Result(outcome: .alreadyFinished, state: JobStatus.State(state), workerId: nil)
        case .notFound: throw DispatcherError(.notFound, "no job \(request.jobId)")
        }
    }
}
