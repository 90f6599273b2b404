import DispatcherProtocol
import FleetCallbacks
import FleetQueue
import Providers
import Renders

/// `render.request`: checks the arguments, then `RenderRequests` gates the category, reserves
/// the credit (non-subscribers) and creates the render and its `render.run` job in one
/// transaction; a refusal (`INVALID_CATEGORY`, `INSUFFICIENT_CREDITS`, `SUBSCRIPTION_EXPIRED`,
/// `INVALID_TOKEN`, `TOKEN_ALREADY_USED`) costs nothing and calls no provider. With
/// `bodyUploadId`/`garmentUploadId` the same transaction enqueues the jobs that make the photos
/// from the uploads, and the render runs after them (`RenderInputs`); photos named by id, it
/// runs after the image jobs still making them, and after the jobs of `after`.
public struct RequestRenderOperation: DispatcherOperation {
    public var access: OperationAccess { .submitters }
    let requests: RenderRequests
    let store: RenderStore
    /// What a `callbackUrl` must pass.
    let outbound: OutboundPolicy

    public func run(_ request: RequestRenderRequest) async throws -> RenderView {
        let requester: Requester
        let owner: String
        switch (request.userId, request.ephemeralToken) {
        case (let user?, nil):
            requester = .user(try storageID(user, field: "userId").value)
            owner = request.ownerId ?? user
        case (nil, let token?):
            // An onboarding render's photos live in the token's own tree, so nothing it does
            // can reach a user's files, and the token's cleanup can delete that tree whole.
            let tokenTree = EphemeralTokens.tokenID(of: token)
            guard request.ownerId == nil || request.ownerId == tokenTree else {
                throw DispatcherError(.badArgument, "ownerId of an onboarding render is the token's id (\(tokenTree)), as token.issue returned it")
            }
            requester = .ephemeralToken(token)
            owner = tokenTree
        default:
            throw DispatcherError(.badArgument, "exactly one of userId and ephemeralToken is required")
        }
        guard let category = GarmentCategory(rawValue: request.category) else {
            throw DispatcherError(.invalidCategory, "unknown category '\(request.category.prefix(64))' (one of \(GarmentCategory.allCases.map(\.rawValue).joined(separator: ", ")))")
        }
        var renderRequest = RenderRequest(
            renderID: try storageID(request.renderId, field: "renderId"), requester: requester,
            ownerID: try storageID(owner, field: "ownerId"), garmentID: try storageID(request.garmentId, field: "garmentId"),
            bodyPhotoID: try storageID(request.bodyPhotoId, field: "bodyPhotoId"), category: category)
        renderRequest.uploads = RenderUploads(
            bodyUploadID: try request.bodyUploadId.map { try storageID($0, field: "bodyUploadId") },
            garmentUploadID: try request.garmentUploadId.map { try storageID($0, field: "garmentUploadId") })
        if let after = request.after {
            do { try NewJob.validate(after: after) } catch QueueError.invalidJob(_, let reason) {
                throw DispatcherError(.badArgument, "args.after \(reason)")
            }
            renderRequest.after = after
        }
        if let url = request.callbackUrl {
            do { _ = try outbound.destination(of: url) } catch { throw DispatcherError(.badArgument, "args.callbackUrl: \(error)") }
            renderRequest.callbackURL = url
        }
        let render = try await requests.request(renderRequest)
        return RenderView(render)
    }
}
