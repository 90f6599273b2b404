/// How long finished jobs stay in the table.
public struct Retention: Sendable, Equatable {
    public var completed: Duration
    public var cancelled: Duration
    public var dead: Duration

    public init(completed: Duration = .seconds(86_400), cancelled: Duration = .seconds(86_400), dead: Duration = .seconds(7 * 86_400)) {
        self.completed = completed
        self.cancelled = cancelled
        self.dead = dead
    }
}

/// One batch of the pruner's delete.
public struct PrunedBatch: Sendable, Equatable {
    public let deleted: Int
    /// The greatest `finished_at` deleted, in microseconds since 1970 (exact, so that the next
    /// batch starting there misses no job that finished in the same instant); nil: none.
    public let newest: Int64?

    public init(deleted: Int, newest: Int64?) {
        self.deleted = deleted
        self.newest = newest
    }
}

public struct RescuedJob: Sendable, Equatable {
    public let id: Int64
    public let kind: JobKind
    /// `available` to run again, `dead` when out of attempts, `cancelled` if cancel was asked.
    public let state: JobState
}
