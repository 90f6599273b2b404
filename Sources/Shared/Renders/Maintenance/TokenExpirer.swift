import FleetPostgres
import FleetQueue
import Logging
import Metrics

/// Removes onboarding tokens that expired without being linked to an account, with what they
/// alone own: their render rows now, their files through an `account.purge` job per storage
/// tree (the image worker deletes them). Safe with any number of dispatchers: tokens are
/// taken with SKIP LOCKED.
public struct TokenExpirer: Sendable {
    /// Expired, never-linked onboarding tokens, their renders and the files only they own.
    public static let task = MaintenanceTask(rawValue: "tokens.expire")

    let pool: PostgresPool
    let logger: Logger

    public init(pool: PostgresPool, logger: Logger) {
        self.pool = pool
        self.logger = logger
    }

    /// Returns how many tokens it deleted.
    @discardableResult
    public func runOnce(batch: Int = 500) async throws -> Int {
        var total = 0
        while true {
            let expired = try await EphemeralTokens.deleteExpired(limit: batch, pool: pool)
            total += expired.tokenIDs.count
            if !expired.tokenIDs.isEmpty {
                Counter(label: "fleet_tokens_expired_total").increment(by: expired.tokenIDs.count)
                logger.info("expired onboarding tokens deleted", metadata: [
                    "tokens": "\(expired.tokenIDs.count)", "render_ids": "\(expired.renderIDs.prefix(20))",
                    "purge_job_ids": "\(expired.purges.values.sorted().prefix(20))",
                ])
            }
            if expired.tokenIDs.count < batch { return total }
        }
    }
}
