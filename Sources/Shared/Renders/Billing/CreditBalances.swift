import FleetPostgres
import FleetSupport
import Foundation
import RenderLedger

/// A user's credits as the app shows them ("credits left") and whether they render free now.
public struct CreditBalance: Sendable, Equatable {
    public let userID: String
    /// Every credit granted (free credits on linking, purchases).
    public let granted: Int
    /// Spent on complete renders, thumbs-down refunds given back.
    public let consumed: Int
    /// Held by renders still under way: consumed when they complete, released when they fail.
    public let reserved: Int
    /// The latest subscription's status (`trial`, `subscribed`, `expired`, `cancelled`), nil for none.
    public let subscriptionStatus: String?
    public let subscriptionExpiresAt: Date?
    /// Whether renders are free now: the same rule as render charging (`CreditLedger.subscribesNow`).
    public let subscribed: Bool

    /// What a new render may still reserve.
    public var available: Int { max(0, granted - consumed - reserved) }
}

/// Reads balances (`CreditLedger.balance`); nothing here moves a credit.
public struct CreditBalances: Sendable {
    /// Apple's billing grace period: a `subscribed` subscription still counts this long after `expires_at`.
    public static let appleBillingGrace: Duration = .seconds(16 * 86_400)

    let pool: PostgresPool
    let billingGrace: Duration

    public init(pool: PostgresPool, billingGrace: Duration = Self.appleBillingGrace) {
        self.pool = pool
        self.billingGrace = billingGrace
    }

    /// The user's balance; a user the fleet has never seen has zeros and no subscription.
    public func balance(of userID: String) async throws -> CreditBalance {
        let row = try await pool.query(CreditLedger.balance, [userID, billingGrace.seconds]).rows[0]
        return CreditBalance(
            userID: userID, granted: try row.int("granted"), consumed: try row.int("consumed"), reserved: try row.int("reserved"),
            subscriptionStatus: row["subscription_status"], subscriptionExpiresAt: row["subscription_expires_at"].flatMap(Double.init).map(Date.init(timeIntervalSince1970:)),
            subscribed: try row.bool("subscribed"))
    }
}
