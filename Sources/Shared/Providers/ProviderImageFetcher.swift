import FleetHTTPClient
import Foundation

/// Turns a `ProviderImage` into bytes: inline images as they are, data URIs decoded, URLs
/// downloaded without credentials (fal's media URLs are public; its key must not travel there).
public struct ProviderImageFetcher: Sendable {
    private let http: any HTTPClient
    private let maxBytes: Int

    public init(http: any HTTPClient, maxBytes: Int = 25 << 20) {
        self.http = http
        self.maxBytes = maxBytes
    }

    public func fetch(_ image: ProviderImage, provider: String, timeout: Duration = .seconds(20)) async throws(ProviderError) -> (bytes: Data, mimeType: String) {
        switch image {
        case .bytes(let bytes, let mimeType):
            return (bytes, mimeType)
        case .url(let url) where url.hasPrefix("data:"):
            guard let comma = url.firstIndex(of: ","), url[..<comma].hasSuffix(";base64"),
                  let bytes = Data(base64Encoded: String(url[url.index(after: comma)...])) else {
                throw ProviderError.malformedResponse(provider: provider, reason: "result image is a data URI that is not base64")
            }
            let mimeType = url.dropFirst("data:".count).prefix { $0 != ";" && $0 != "," }
            return (bytes, mimeType.isEmpty ? "application/octet-stream" : String(mimeType))
        case .url(let url):
            guard url.hasPrefix("https://") || url.hasPrefix("http://") else {
                throw ProviderError.malformedResponse(provider: provider, reason: "result image URL is not http(s)")
            }
            let response = try await http.send(HTTPClientRequest(url: url, timeout: timeout, maxResponseBytes: maxBytes), provider: provider)
            guard response.isSuccess else {
                throw ProviderError.from(status: response.status, message: "downloading the result image from \(HTTPClientError.redacted(url))", provider: provider)
            }
            guard !response.body.isEmpty else {
                throw ProviderError.malformedResponse(provider: provider, reason: "result image at \(HTTPClientError.redacted(url)) is empty")
            }
            let mimeType = response.headers["content-type"]?.split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces) }
            return (response.body, mimeType ?? "application/octet-stream")
        }
    }
}
