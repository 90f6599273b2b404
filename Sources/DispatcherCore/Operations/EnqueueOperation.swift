import DispatcherProtocol
import FleetQueue

/// `enqueue`: any known job kind with its payload object.
public struct EnqueueOperation: DispatcherOperation {
    public var access: OperationAccess { .submitters }
    let submitter: JobSubmitter

    public init(queue: JobQueue) { submitter = JobSubmitter(queue: queue) }

    public func run(_ request: EnqueueRequest) async throws -> EnqueuedJobResult {
        try await submitter.submit(kind: JobKind(rawValue: request.kind), payload: request.payload ?? [:], options: request.options)
    }
}
