import DispatcherProtocol
import FleetStorage
import Foundation
import Logging
import Renders

/// `upload.presign`: a PUT URL for one upload in its owner's tree, signed for its exact length
/// and type, so the upload goes straight to the store.
public struct PresignUploadOperation: DispatcherOperation {
    public var access: OperationAccess { .submitters }
    let urls: any ImageURLs
    let tokens: EphemeralTokens
    /// The image worker's upload limit: a larger upload would only die there as `IMAGE_TOO_LARGE`.
    let maxBytes: Int
    let logger: Logger?

    public func run(_ request: UploadPresignRequest) async throws -> UploadPresignRequest.Result {
        let seconds = try presignLifetime(request.expiresInSeconds)
        guard request.contentLength >= 1 else { throw DispatcherError(.badArgument, "args.contentLength must be at least 1") }
        guard request.contentLength <= maxBytes else {
            throw DispatcherError(.imageTooLarge, "args.contentLength \(request.contentLength) is over the upload limit of \(maxBytes) bytes")
        }
        let upload = try request.uploadId.map { try storageID($0, field: "uploadId") } ?? Self.freshUploadID()
        let owner = try await owner(of: request)
        let url = try urls.put(
            .upload(user: owner, upload: upload), contentLength: request.contentLength, contentType: request.contentType.rawValue,
            seconds: seconds, at: Date())
        logger?.debug("upload presigned", metadata: ["url": "\(url)", "bytes": "\(request.contentLength)"])
        return UploadPresignRequest.Result(uploadId: upload.value, ownerId: owner.value, url: url)
    }

    /// The tree the upload lands in: the user's, or a live onboarding token's (its id), where
    /// `render.request` with that token looks for its photos and the token's expiry purges.
    private func owner(of request: UploadPresignRequest) async throws -> StorageID {
        switch (request.userId, request.ephemeralToken) {
        case (let user?, nil): return try storageID(user, field: "userId")
        case (nil, let token?):
            guard let tree = try await tokens.liveTokenID(of: token) else { throw RenderRequestError.invalidToken }
            return try StorageID(tree)
        default: throw DispatcherError(.badArgument, "exactly one of args.userId and args.ephemeralToken")
        }
    }

    /// `up-` and 24 random hex digits: no upload id the caller could pick collides by chance.
    private static func freshUploadID() throws -> StorageID {
        try StorageID("up-" + (0..<12).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined())
    }
}
