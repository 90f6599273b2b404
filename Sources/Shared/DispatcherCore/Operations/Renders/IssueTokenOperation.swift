import DispatcherProtocol
import Renders

/// `token.issue`: a new onboarding token for an app at first launch (only its hash is kept).
public struct IssueTokenOperation: DispatcherOperation {
    public var access: OperationAccess { .submitters }
    let tokens: EphemeralTokens

    public func run(_ request: IssueTokenRequest) async throws -> IssueTokenRequest.Result {
        let issued = try await tokens.issue()
        return IssueTokenRequest.Result(token: issued.token, tokenId: issued.tokenID, expiresAt: issued.expiresAt)
    }
}
