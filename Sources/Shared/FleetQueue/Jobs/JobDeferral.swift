import FleetSupport

/// Thrown by a handler whose job cannot run yet for a reason that is not the job's: it goes back
/// to the queue and the attempt is not spent (`docs/queue.md`, "Deferral"). A job deferred stays
/// open, so whatever bounds its life (a render's deadline) must be checked by its handler.
public enum JobDeferral: Error, CustomStringConvertible, Sendable {
    /// Until every one of `jobs` has ended: they make what it needs. It waits as a job enqueued
    /// after them does (`NewJob.after`): released by the last one's completion, cancelled
    /// `DEPENDENCY_FAILED` when one fails; those already ended are not waited for.
    case runAfter(jobs: [Int64], reason: String)
    /// Again after `delay`, with `reason` and `code` recorded among its errors (the attempt they
    /// name is not counted).
    case retryIn(Duration, code: JobErrorCode?, reason: String)

    public var description: String {
        switch self {
        case .runAfter(let jobs, let reason): "\(reason) (runs after jobs \(jobs.map(String.init).joined(separator: ", ")))"
        case .retryIn(let delay, _, let reason): "\(reason) (again in \(delay.seconds) s)"
        }
    }
}
