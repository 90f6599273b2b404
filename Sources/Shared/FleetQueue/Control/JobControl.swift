import FleetPostgres
import Foundation
import Logging

/// What operators do to the queue (`jobs.list`, retries, discards, pauses), each action that
/// changes something written to the audit trail with who asked. Bulk actions run in short
/// batches, one statement and one transaction each, skipping rows others hold: they never hold
/// locks long enough to stall the claim.
public struct JobControl: Sendable {
    public static let maxPageSize = 500
    /// Rows per statement of a bulk action.
    public static let batchSize = 1_000

    /// Jobs a bulk retry's answer names per reason it left jobs alone, at most.
    public static let sampleSize = 10

    let driver: PostgresQueueDriver
    /// Each audited action is also logged, with the actor's token name (never the token).
    let logger: Logger?
    /// Decides which jobs of its kinds a retry may put back (the renders' module, for `render.run`).
    let retryGuard: (any JobRetryGuard)?

    init(driver: PostgresQueueDriver, logger: Logger? = nil, retryGuard: (any JobRetryGuard)? = nil) {
        self.driver = driver
        self.logger = logger
        self.retryGuard = retryGuard
    }

    public init(executor: any PostgresExecutor, logger: Logger? = nil, retryGuard: (any JobRetryGuard)? = nil) {
        self.init(driver: PostgresQueueDriver(executor: executor), logger: logger, retryGuard: retryGuard)
    }

    public func list(_ filter: JobFilter, before: Int64?, limit: Int) async throws -> [JobSummary] {
        try await driver.jobList(filter, before: before, limit: min(max(limit, 1), Self.maxPageSize))
    }

    public func retry(id: Int64, runAt: Date?, actor: String) async throws -> JobRetryResult {
        let result = try await driver.jobRetry(id: id, runAt: runAt, guard: retryGuard)
        if result == .retried { try await audit(actor, "job.retry", ["jobId": id], affected: 1) }
        return result
    }

    public func discard(id: Int64, actor: String) async throws -> JobDiscardResult {
        let result = try await driver.jobDiscard(id: id)
        if result == .discarded { try await audit(actor, "job.discard", ["jobId": id], affected: 1) }
        return result
    }

    /// Retries up to `limit` `dead` or `cancelled` jobs matching `filter` (a dry run counts them):
    /// first those of the kinds the retry guard does not decide for, then those it does, each
    /// candidate shown to it; the answer says how many it left alone, and why.
    public func retryMany(_ filter: JobFilter, limit: Int, dryRun: Bool, actor: String) async throws -> BulkRetryOutcome {
        let filter = filter.restricted(to: [.dead, .cancelled])
        let (plain, guarded) = split(filter)
        var outcome = BulkRetryOutcome()
        if let plain {
            outcome.retried = dryRun
                ? try await driver.jobCount(plain, limit: limit)
                : try await inBatches(limit: limit) { try await driver.jobRetryBatch(plain, limit: $0) }
        }
        if let retryGuard, let guarded {
            var after: Int64?
            while outcome.retried < limit {
                let wanted = min(Self.batchSize, limit - outcome.retried)
                let batch = try await driver.jobRetryBatch(guarded, after: after, limit: wanted, guard: retryGuard, dryRun: dryRun)
                outcome.retried += batch.retried.count
                for (id, refusal) in batch.refused.sorted(by: { $0.key < $1.key }) { outcome.leave(id, refusal) }
                after = batch.lastID
                if batch.scanned < wanted { break }
            }
        }
        if !dryRun { try await audit(actor, "jobs.retry", AuditedFilter(filter: filter, limit: limit), affected: outcome.retried) }
        return outcome
    }

    /// `filter` split by who decides: the jobs of kinds the retry guard does not decide for, and
    /// those it does; nil for a part the filter's kinds leave empty.
    private func split(_ filter: JobFilter) -> (plain: JobFilter?, guarded: JobFilter?) {
        guard let retryGuard else { return (filter, nil) }
        var plain = filter, guarded = filter
        if let kinds = filter.kinds {
            plain.kinds = kinds.filter { !retryGuard.kinds.contains($0) }
            guarded.kinds = kinds.filter(retryGuard.kinds.contains)
        } else {
            plain.excludedKinds = retryGuard.kinds.sorted { $0.rawValue < $1.rawValue }
            guarded.kinds = plain.excludedKinds
        }
        return (plain.kinds?.isEmpty == true ? nil : plain, guarded.kinds?.isEmpty == true ? nil : guarded)
    }

    /// Deletes up to `limit` finished jobs matching `filter` (a dry run counts them).
    public func discardMany(_ filter: JobFilter, limit: Int, dryRun: Bool, actor: String) async throws -> Int {
        let filter = filter.restricted(to: [.completed, .dead, .cancelled])
        guard !dryRun else { return try await driver.jobCount(filter, limit: limit) }
        let done = try await inBatches(limit: limit) { try await driver.jobDiscardBatch(filter, limit: $0) }
        try await audit(actor, "jobs.discard", AuditedFilter(filter: filter, limit: limit), affected: done)
        return done
    }

    /// True if it was not paused yet.
    public func pause(_ target: PauseTarget, actor: String) async throws -> Bool {
        let changed = try await driver.queuePause(target, by: actor)
        try await audit(actor, "queue.pause", target, affected: changed ? 1 : 0)
        return changed
    }

    /// True if it was paused.
    public func resume(_ target: PauseTarget, actor: String) async throws -> Bool {
        let changed = try await driver.queueResume(target)
        try await audit(actor, "queue.resume", target, affected: changed ? 1 : 0)
        return changed
    }

    public func pauses() async throws -> [QueuePause] { try await driver.queuePauses() }

    /// Dead jobs grouped by kind and latest error code (`QueueDriver.jobDeadGroups`).
    public func deadGroups() async throws -> [DeadJobGroup] { try await driver.jobDeadGroups() }

    /// The queue per kind and the last 60 minutes' endings.
    public func overview() async throws -> QueueOverview { try await driver.queueOverview() }

    /// Creates or replaces a fleet-wide limit (`ConcurrencyLimit`).
    public func setLimit(_ limit: ConcurrencyLimit, actor: String) async throws {
        try await driver.limitSet(limit, by: actor)
        try await audit(actor, "limit.set", AuditedLimit(limit), affected: 1)
    }

    /// True if there was a rule.
    public func removeLimit(key: String, actor: String) async throws -> Bool {
        let removed = try await driver.limitRemove(key: key)
        try await audit(actor, "limit.remove", ["key": key], affected: removed ? 1 : 0)
        return removed
    }

    /// The rules and, per rule, the keys in use under it.
    public func limits() async throws -> [(ConcurrencyLimit, [LimitUsage])] {
        let usage = try await driver.limitUsage()
        return try await driver.limitList().map { rule in (rule, usage.filter { $0.rule == rule.key }) }
    }

    public func auditTrail(before: Int64?, limit: Int) async throws -> [AuditEntry] {
        try await driver.auditList(before: before, limit: min(max(limit, 1), Self.maxPageSize))
    }

    /// Runs `batch` (told how many rows it may change, answering how many it did) until `limit`
    /// rows changed or a batch changed fewer than it was allowed; answers how many changed.
    private func inBatches(limit: Int, _ batch: (Int) async throws -> Int) async throws -> Int {
        var done = 0
        while done < limit {
            let wanted = min(Self.batchSize, limit - done)
            let changed = try await batch(wanted)
            done += changed
            if changed < wanted { break }
        }
        return done
    }

    /// Records an action taken elsewhere (the console's cancel, which goes through the backends'
    /// `cancel`) in the same trail, the same way.
    public func record(actor: String, action: String, target: some Encodable & Sendable, affected: Int) async throws {
        try await audit(actor, action, target, affected: affected)
    }

    private func audit(_ actor: String, _ action: String, _ target: some Encodable, affected: Int) async throws {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = .sortedKeys
        let text = String(decoding: try encoder.encode(target), as: UTF8.self)
        try await driver.auditRecord(actor: actor, action: action, target: text, affected: affected)
        logger?.info("operator action", metadata: ["actor": "\(actor)", "action": "\(action)", "target": "\(text)", "affected": "\(affected)"])
    }
}

/// A limit as the audit trail keeps it.
private struct AuditedLimit: Encodable {
    let key: String
    let maxRunning: Int?
    let rate: Int?
    let rateWindowSeconds: Double

    init(_ limit: ConcurrencyLimit) {
        key = limit.key
        maxRunning = limit.maxRunning
        rate = limit.rate
        rateWindowSeconds = limit.rateWindow.seconds
    }
}

/// A bulk action's target as the audit trail keeps it.
private struct AuditedFilter: Encodable {
    let filter: JobFilter
    let limit: Int
}
