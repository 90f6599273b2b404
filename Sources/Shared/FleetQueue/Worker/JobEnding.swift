import FleetPostgres
import FleetSupport
import Synchronization

/// How a handler ends its job in its own transaction (`JobContext.end`).
public enum JobEnding: Sendable, Equatable {
    /// Completed with its result, as when the handler returns it.
    case completed(JSONValue?)
    /// Dead at once with a failure's code and message, as when the handler throws
    /// `JobError.permanent(code:message:)`.
    case dead(code: JobErrorCode, message: String)

    var outcome: JobOutcome.Kind {
        switch self {
        case .completed(let result): .completed(result: result?.jsonText)
        case .dead(let code, let message): .dead(error: message, code: code)
        }
    }
}

/// The end a handler wrote for its job in its own transaction, for the worker to record nothing
/// more. It counts only when the handler then answers as it ended the job (returns that result,
/// throws that permanent error): anything else it throws means that transaction did not commit,
/// and the worker records that as usual (its compare-and-set still holds, the end having rolled
/// back with the rest).
final class HandlerEnding: Sendable {
    private let written = Mutex<JobOutcome.Kind?>(nil)

    func note(_ outcome: JobOutcome.Kind) { written.withLock { $0 = outcome } }

    /// The outcome written, when the handler's answer `result` is that outcome.
    func outcome(answering result: Result<JSONValue?, any Error>) -> JobOutcome.Kind? {
        guard let written = written.withLock({ $0 }) else { return nil }
        let answered: JobOutcome.Kind? = switch result {
        case .success(let value): .completed(result: value?.jsonText)
        case .failure(JobError.permanent(let code, let message)): .dead(error: message, code: code)
        case .failure: nil
        }
        return answered == written ? written : nil
    }
}

extension JobContext {
    /// Ends `job` in the transaction open on `connection`, so that the job's end commits with
    /// the handler's own writes or not at all (a render's result, its credit and its job: a crash
    /// before the commit leaves the job running, to be rescued and run again, and nothing
    /// settled). The handler then returns or throws as it ended the job (`JobEnding`), and the
    /// worker writes no outcome of its own. The statement is the worker's finish for one job
    /// (`PostgresQueueDriver.jobEnd`, a compare-and-set on its lease): false when the job is no
    /// longer leased to this worker, and then nothing was written. A result over
    /// `JobResultLimit.maxBytes` throws.
    public func end(_ job: ClaimedJob, _ ending: JobEnding, on connection: PostgresConnection) async throws -> Bool {
        let outcome = ending.outcome
        if case .completed(let text?) = outcome { try JobResultLimit.check(text) }
        guard try await PostgresQueueDriver(executor: connection).jobEnd(owner: workerID, id: job.id, attempt: job.attempt, ending) else {
            return false
        }
        endedByHandler.note(outcome)
        return true
    }
}
