import Foundation

/// `credits.get`: a user's balance, for the app's "credits left" and its subscribe prompt.
public struct CreditsGetRequest: DispatcherRequest {
    public static let op = "credits.get"
    public typealias Result = CreditBalanceView
    public let userId: String
    public init(userId: String) { self.userId = userId }
}

/// A user's credits and subscription as the protocol shows them; optional fields as explicit nulls.
public struct CreditBalanceView: Codable, Sendable, Equatable {
    /// The latest subscription (the one ending last).
    public struct Subscription: Codable, Sendable, Equatable {
        /// `trial`, `subscribed`, `expired` or `cancelled`.
        public let status: String
        @ExplicitNull public private(set) var expiresAt: Date?
        public init(status: String, expiresAt: Date?) {
            self.status = status
            self.expiresAt = expiresAt
        }
    }

    public let userId: String
    public let granted: Int
    public let consumed: Int
    /// Held by renders under way: consumed when they complete, released when they fail.
    public let reserved: Int
    /// granted − consumed − reserved: what new renders may still reserve.
    public let available: Int
    /// Whether renders are free now (trial or paid and not expired, cancelled until its end, paid
    /// within Apple's billing grace): the rule render charging applies.
    public let subscribed: Bool
    /// null when the user never had one.
    @ExplicitNull public private(set) var subscription: Subscription?

    public init(userId: String, granted: Int, consumed: Int, reserved: Int, available: Int, subscribed: Bool, subscription: Subscription?) {
        self.userId = userId
        self.granted = granted
        self.consumed = consumed
        self.reserved = reserved
        self.available = available
        self.subscribed = subscribed
        self.subscription = subscription
    }
}
