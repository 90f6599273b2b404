import DispatcherProtocol
import FleetQueue

/// `status`: one job by id.
public struct StatusOperation: DispatcherOperation {
    public var access: OperationAccess { .everyRole }
    let queue: JobQueue

    public init(queue: JobQueue) { self.queue = queue }

    public func run(_ request: StatusRequest) async throws -> JobStatus {
        try await queue.status(of: request.jobId)
    }
}

extension JobQueue {
    /// The job as the protocol shows it, or `NOT_FOUND`.
    func status(of id: Int64) async throws -> JobStatus {
        guard let record = try await job(id: id) else { throw DispatcherError(.notFound, "no job \(id)") }
        return JobStatus(record)
    }
}
