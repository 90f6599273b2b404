import DispatcherProtocol
import Renders

/// `account.link`: the onboarding token joins a new account, once (`EphemeralTokens.link`).
public struct LinkAccountOperation: DispatcherOperation {
    public var access: OperationAccess { .submitters }
    let tokens: EphemeralTokens
    let freeCredits: Int

    public func run(_ request: LinkAccountRequest) async throws -> LinkAccountRequest.Result {
        let user = try storageID(request.userId, field: "userId").value
        switch try await tokens.link(token: request.ephemeralToken, userID: user, freeCredits: freeCredits) {
        case .linked(let renderID, let granted):
            return LinkAccountRequest.Result(userId: user, renderId: renderID, creditsGranted: granted)
        case .invalidToken:
            throw DispatcherError(.invalidToken, "the onboarding token is unknown, expired or already linked")
        }
    }
}
