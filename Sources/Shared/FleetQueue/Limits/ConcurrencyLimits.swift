import FleetPostgres

/// The fleet-wide limits as the modules that limit their own jobs use them (renders: a limit per
/// provider and per requester): seed their defaults, read a key's load before admitting work, and
/// throttle a key its provider said 429 for. Operators' changes go through `JobControl`, which
/// audits them. On a pool or inside the caller's transaction.
public struct ConcurrencyLimits: Sendable {
    let driver: PostgresQueueDriver

    public init(executor: any PostgresExecutor) {
        self.driver = PostgresQueueDriver(executor: executor)
    }

    /// Writes `limit` unless its key has a rule already, so an operator's change survives restarts.
    public func seed(_ limit: ConcurrencyLimit, by actor: String) async throws {
        try await driver.limitSet(limit, by: actor, keepingExisting: true)
    }

    /// The rule over `key` (its own, else the longest prefix rule) and the key's use: running
    /// jobs, `kind`'s jobs not started (due, or waiting for the jobs they run after), starts in
    /// the rule's window. One statement; without a rule,
    /// nothing is counted.
    public func load(key: String, kind: JobKind) async throws -> LimitLoad {
        try await driver.limitLoad(key: key, kind: kind)
    }

    /// Halves `key`'s rate fleet-wide for a while (`ConcurrencyLimit.Throttle`); the rule now in
    /// force, nil when no rule covers the key.
    public func throttle(key: String) async throws -> ConcurrencyLimit? {
        try await driver.limitThrottle(key: key)
    }
}
