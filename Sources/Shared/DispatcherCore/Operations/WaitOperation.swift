import DispatcherProtocol
import FleetQueue

/// `wait`: answers once the job is terminal, woken by the queue's `fleet_jobs_finished`
/// notifications (no polling; the job is marked as waited for, so its end sends one), or when the
/// timeout passes or the server shuts down.
public struct WaitOperation: DispatcherOperation {
    public var access: OperationAccess { .everyRole }
    let queue: JobQueue
    let watcher: FinishWatcher

    public init(queue: JobQueue, watcher: FinishWatcher) {
        self.queue = queue
        self.watcher = watcher
    }

    public func run(_ request: WaitRequest) async throws -> WaitRequest.Result {
        // Before the first read: an end after this mark notifies; one before it, the read sees.
        try await queue.watchFinish(id: request.jobId)
        let (job, timedOut) = try await watcher.wait(
            for: .job(request.jobId), timeoutMs: request.timeoutMs, read: { [queue] in try await queue.status(of: request.jobId) },
            isDone: \.isTerminal)
        return WaitRequest.Result(job: job, timedOut: timedOut)
    }
}
