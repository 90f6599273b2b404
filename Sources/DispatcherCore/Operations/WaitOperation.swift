import ServiceLifecycle
import Shared

/// `wait`: answers once the job is terminal, woken by the queue's `fleet_jobs_finished`
/// notifications (no polling), or when the timeout passes or the server shuts down.
public struct WaitOperation: DispatcherOperation {
    let queue: JobQueue
    let watcher: JobFinishWatcher

    public init(queue: JobQueue, watcher: JobFinishWatcher) {
        self.queue = queue
        self.watcher = watcher
    }

    public func run(_ request: WaitRequest) async throws -> WaitRequest.Result {
        let timeoutMs = request.timeoutMs ?? WaitRequest.defaultTimeoutMs
        guard (0...WaitRequest.maxTimeoutMs).contains(timeoutMs) else {
            throw DispatcherError(.badArgument, "timeoutMs must be between 0 and \(WaitRequest.maxTimeoutMs)")
        }
        // Watching starts before the first read, so a job finishing in between still wakes us.
        let (wakeUps, watching) = watcher.wakeUps(for: request.jobId)
        defer { watching.finish() }
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                // The deadline (or shutdown) ends the wake-ups, which ends the wait.
                try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .milliseconds(timeoutMs)) }
                watching.finish()
            }
            defer { group.cancelAll() }
            var wakeUp = wakeUps.makeAsyncIterator()
            while true {
                let job = try await queue.status(of: request.jobId)
                if job.isTerminal { return WaitRequest.Result(job: job, timedOut: false) }
                if await wakeUp.next() == nil {
                    let job = try await queue.status(of: request.jobId)
                    return WaitRequest.Result(job: job, timedOut: !job.isTerminal)
                }
            }
        }
    }
}
