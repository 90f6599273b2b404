import DispatcherProtocol
import FleetQueue
import FleetSupport

/// `jobs.enqueueGraph`: jobs that run after one another, named locally, enqueued all or none.
/// Each job is checked as `enqueue` checks one (the same kinds refused, the same options).
public struct EnqueueGraphOperation: DispatcherOperation {
    public var access: OperationAccess { .submitters }
    let enqueue: EnqueueOperation
    /// A graph is one statement and one commit of its own, never batched with other requests.
    let queue: JobQueue

    public init(enqueue: EnqueueOperation, queue: JobQueue) {
        self.enqueue = enqueue
        self.queue = queue
    }

    public func run(_ request: EnqueueGraphRequest) async throws -> EnqueueGraphRequest.Result {
        guard (1...EnqueueGraphRequest.maxJobs).contains(request.jobs.count) else {
            throw DispatcherError(.badArgument, "args.jobs must hold 1 to \(EnqueueGraphRequest.maxJobs) jobs")
        }
        var nodes: [JobGraph.Node] = []
        for (index, job) in request.jobs.enumerated() {
            let field = "args.jobs[\(index)]"
            if job.options?.idempotencyKey != nil {
                throw DispatcherError(.badArgument, "\(field).options.idempotencyKey: give the graph's args.idempotencyKey instead")
            }
            if job.options?.after != nil { throw DispatcherError(.badArgument, "\(field).options.after: give \(field).after instead") }
            var ids: [Int64] = [], names: [String] = []
            for dependency in job.after ?? [] {
                switch dependency {
                case .id(let id): ids.append(id)
                case .job(let name): names.append(name)
                }
            }
            var options = job.options ?? JobOptions()
            options.after = ids
            let newJob = try enqueue.job(kind: job.kind, payload: job.payload ?? [:], options: options, field: field, afterField: "\(field).after")
            nodes.append(JobGraph.Node(name: job.name, job: newJob, runsAfter: names))
        }
        if let key = request.idempotencyKey, key.utf8.contains(0) { throw DispatcherError(.badArgument, "args.idempotencyKey must not contain NUL") }
        let graph = try JobGraph(nodes, idempotencyKey: request.idempotencyKey)
        let enqueued = try await queue.enqueue(graph)
        return .init(jobs: zip(request.jobs, enqueued).map { .init(name: $0.name, jobId: $1.id, kind: $0.kind) },
                     isNew: enqueued.first?.isNew ?? true)
    }
}
