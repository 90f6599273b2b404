/// Errors of the queue's API.
public enum QueueError: Error, CustomStringConvertible, Sendable, Equatable {
    case unknownKind(String)
    /// A `NewJob` field out of its range; `reason` says what it must be.
    case invalidJob(field: NewJob.Field, reason: String)
    case internalMismatch(String)
    /// A `ConcurrencyLimit` that cannot be stored; the text says why.
    case invalidLimit(String)
    /// `after` names jobs that do not exist (pruned, or never were).
    case unknownDependencies([Int64])
    /// `after` names a job that already ended `dead` or `cancelled`: the new job could never run.
    case failedDependency(id: Int64, state: JobState)
    /// A `JobGraph` that cannot be enqueued; the text says why.
    case invalidGraph(String)

    public var description: String {
        switch self {
        case .unknownKind(let kind): "unknown job kind '\(kind)'"
        case .invalidLimit(let reason): "invalid limit: \(reason)"
        case .invalidJob(let field, let reason): "invalid job: \(field.rawValue) \(reason)"
        case .internalMismatch(let reason): "queue driver mismatch: \(reason)"
        case .unknownDependencies(let ids):
            "invalid job: after names \(ids.count == 1 ? "job \(ids[0]), which does not" : "jobs \(ids.map(String.init).joined(separator: ", ")), which do not") exist"
        case .failedDependency(let id, let state): "invalid job: after names job \(id), which already ended \(state.rawValue): it could never run"
        case .invalidGraph(let reason): "invalid job graph: \(reason)"
        }
    }
}
