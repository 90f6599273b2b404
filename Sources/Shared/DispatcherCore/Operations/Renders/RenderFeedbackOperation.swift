import DispatcherProtocol
import Renders

/// `render.feedback`: thumbs up or down on a user's complete render; a thumbs-down gives the
/// credit back once, however often it is sent (`RenderStore.feedback`).
public struct RenderFeedbackOperation: DispatcherOperation {
    public var access: OperationAccess { .submitters }
    static let maxCategoryLength = 64
    let store: RenderStore

    public func run(_ request: RenderFeedbackRequest) async throws -> RenderFeedbackRequest.Result {
        if let category = request.category, category.isEmpty || category.count > Self.maxCategoryLength || category.utf8.contains(0) {
            throw DispatcherError(.badArgument, "category must be 1 to \(Self.maxCategoryLength) characters")
        }
        let renderID = try storageID(request.renderId, field: "renderId")
        switch try await store.feedback(renderID: renderID, userID: request.userId, vote: request.vote.rawValue, category: request.category) {
        case .recorded(let refunded):
            return RenderFeedbackRequest.Result(renderId: request.renderId, vote: request.vote, refunded: refunded)
        case .notFound:
            // Feedback moves credits, so it is a user's: an onboarding render takes it once linked.
            if let render = try await store.render(id: renderID), render.userID == nil {
                throw DispatcherError(.notFound, "render \(request.renderId) belongs to an onboarding token not linked yet: link it first (account.link), then send feedback as that user")
            }
            throw DispatcherError(.notFound, "no render \(request.renderId) of user \(request.userId)")
        case .notComplete:
            throw DispatcherError(.renderNotComplete, "render \(request.renderId) is not complete; feedback is for finished renders")
        }
    }
}
