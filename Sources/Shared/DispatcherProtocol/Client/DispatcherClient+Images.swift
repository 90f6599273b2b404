extension DispatcherClient {
    /// A PUT URL for an upload straight to the image store (`upload.presign`): send the bytes with
    /// exactly `result.headers`, then name `result.uploadId` in `render.request` or `image.normalize`.
    public func presignUpload(
        userId: String? = nil, ephemeralToken: String? = nil, uploadId: String? = nil, contentType: UploadPresignRequest.ContentType,
        contentLength: Int, expiresInSeconds: Int? = nil
    ) async throws -> UploadPresignRequest.Result {
        try await send(UploadPresignRequest(
            userId: userId, ephemeralToken: ephemeralToken, uploadId: uploadId, contentType: contentType, contentLength: contentLength,
            expiresInSeconds: expiresInSeconds))
    }

    /// A GET URL for one of a user's images (`image.url`), to redirect the app to.
    public func imageURL(userId: String, kind: ImageURLRequest.Kind, id: String, expiresInSeconds: Int? = nil) async throws -> PresignedURLView {
        try await send(ImageURLRequest(userId: userId, kind: kind, id: id, expiresInSeconds: expiresInSeconds))
    }
}
