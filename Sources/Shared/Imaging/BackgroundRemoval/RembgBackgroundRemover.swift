import FleetHTTPClient
import Foundation

/// A self-hosted rembg server (`rembg s`): `POST /api/remove`, multipart, the photo in the
/// `file` part and the model as a form field; the answer is the RGBA PNG itself.
public struct RembgBackgroundRemover: BackgroundRemover {
    public let name = "rembg"
    public let baseURL: String
    public let model: String
    public let timeout: Duration
    let http: any HTTPClient

    public init(baseURL: String, model: String = "bria-rmbg", timeout: Duration, http: any HTTPClient) {
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.model = model
        self.timeout = timeout
        self.http = http
    }

    public func cutout(of photo: Data) async throws -> Data {
        var form = MultipartForm()
        form.addFile("file", filename: "garment.jpg", contentType: "image/jpeg", data: photo)
        form.addField("model", model)
        let request = HTTPClientRequest(
            method: .post, url: baseURL + "/api/remove",
            headers: [("Content-Type", form.contentType), ("Accept", "image/png")],
            body: form.encoded, timeout: timeout)
        let response = try await BackgroundRemovalError.send(request, with: http, backend: name)
        try BackgroundRemovalError.requirePNG(response.body, backend: name, contentType: response.headers["content-type"])
        return response.body
    }
}
