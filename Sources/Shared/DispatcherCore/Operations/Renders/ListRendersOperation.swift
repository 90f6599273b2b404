import DispatcherProtocol
import Renders

/// `renders.list`: a user's renders, newest first.
public struct ListRendersOperation: DispatcherOperation {
    public var access: OperationAccess { .everyRole }
    let store: RenderStore

    public func run(_ request: ListRendersRequest) async throws -> ListRendersRequest.Result {
        let limit = request.limit ?? ListRendersRequest.defaultLimit
        guard (1...ListRendersRequest.maxLimit).contains(limit) else {
            throw DispatcherError(.badArgument, "limit must be between 1 and \(ListRendersRequest.maxLimit)")
        }
        let renders = try await store.renders(userID: try storageID(request.userId, field: "userId").value, limit: limit)
        return ListRendersRequest.Result(renders: renders.map { RenderView($0) })
    }
}
