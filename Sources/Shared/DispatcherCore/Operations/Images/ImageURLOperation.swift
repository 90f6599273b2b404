import DispatcherProtocol
import FleetStorage
import Foundation
import Logging
import Renders

/// `image.url`: a GET URL for one of a user's images, its key built from ids (never a caller's
/// path), for the backend's auth-gated image endpoint to redirect to.
public struct ImageURLOperation: DispatcherOperation {
    public var access: OperationAccess { .submitters }
    let urls: any ImageURLs
    let store: RenderStore
    let logger: Logger?

    public func run(_ request: ImageURLRequest) async throws -> PresignedURLView {
        let seconds = try presignLifetime(request.expiresInSeconds)
        let user = try storageID(request.userId, field: "userId")
        let id = try storageID(request.id, field: "id")
        let key: StorageKey
        switch request.kind {
        case .body: key = .bodyPhoto(user: user, photo: id)
        case .garment: key = .garment(user: user, garment: id)
        case .cutout: key = .garmentCutout(user: user, garment: id)
        case .preview: key = .garmentPreview(user: user, garment: id)
        case .render: key = try await renderResult(id, of: user)
        }
        let url = try urls.get(key, seconds: seconds, at: Date())
        logger?.debug("image URL presigned", metadata: ["url": "\(url)"])
        return url
    }

    /// A render's result lives in the tree it was made in (an onboarding token's stays there
    /// after linking), which its row names; someone else's render is `NOT_FOUND`.
    private func renderResult(_ id: StorageID, of user: StorageID) async throws -> StorageKey {
        guard let render = try await store.render(id: id), render.userID == user.value || render.ownerID == user else {
            throw DispatcherError(.notFound, "no render \(id) of \(user)")
        }
        guard render.status == .complete else { throw DispatcherError(.renderNotComplete, "render \(id) is \(render.status.rawValue), not complete") }
        return .render(user: render.ownerID, render: id)
    }
}
