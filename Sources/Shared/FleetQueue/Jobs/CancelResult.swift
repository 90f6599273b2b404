public enum CancelResult: Sendable, Equatable {
    /// It was queued and is now `cancelled`.
    case cancelled
    /// It is running; its worker has been told to stop.
    case requested(owner: String?)
    /// It had already ended in this state.
    case alreadyFinished(JobState)
    case notFound
}
