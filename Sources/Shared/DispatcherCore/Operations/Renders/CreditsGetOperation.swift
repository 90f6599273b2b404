import DispatcherProtocol
import Renders

/// `credits.get`: a user's balance and whether they subscribe now (`CreditBalances`).
public struct CreditsGetOperation: DispatcherOperation {
    public var access: OperationAccess { .submitters }
    let balances: CreditBalances

    public func run(_ request: CreditsGetRequest) async throws -> CreditBalanceView {
        let balance = try await balances.balance(of: try storageID(request.userId, field: "userId").value)
        return CreditBalanceView(
            userId: balance.userID, granted: balance.granted, consumed: balance.consumed, reserved: balance.reserved,
            available: balance.available, subscribed: balance.subscribed,
            subscription: balance.subscriptionStatus.map { CreditBalanceView.Subscription(status: $0, expiresAt: balance.subscriptionExpiresAt) })
    }
}
