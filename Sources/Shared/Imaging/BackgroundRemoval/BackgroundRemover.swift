import FleetHTTPClient
import FleetQueue
import FleetSupport
import Foundation

/// One way to separate a garment from its background. Given the normalised photo (JPEG), it
/// returns the cut-out as a PNG with alpha, at the photo's size or the model's.
public protocol BackgroundRemover: Sendable {
    /// Recorded with each cut-out and used as the metrics label: `replicate`, `rembg`, `local`.
    var name: String { get }
    func cutout(of photo: Data) async throws -> Data
}

/// Why a backend produced no cut-out.
public enum BackgroundRemovalError: CodedError, CustomStringConvertible, Sendable, Equatable {
    /// 5xx, connection failure, timeout, failed prediction or an unusable answer: the next
    /// backend of the chain is tried.
    case transient(backend: String, reason: String)
    /// The backend refused the request (4xx): another backend would be asked the same thing,
    /// so the chain stops here.
    case rejected(backend: String, status: Int, reason: String)
    /// Every backend failed transiently; the job is retried later.
    case unavailable(reasons: [String])

    public var code: JobErrorCode {
        switch self {
        case .transient, .unavailable: .backgroundRemovalUnavailable
        case .rejected: .backgroundRemovalRejected
        }
    }

    public var description: String {
        switch self {
        case .transient(let backend, let reason): "\(backend): \(reason)"
        case .rejected(let backend, let status, let reason): "\(code): \(backend) refused the image (HTTP \(status)): \(reason)"
        case .unavailable(let reasons): "\(code): every backend failed: \(reasons.joined(separator: "; "))"
        }
    }
}

extension BackgroundRemovalError {
    /// The error for a non-2xx answer: 4xx refuses, except 408 and 429 which only say "later".
    static func forStatus(_ response: HTTPClientResponse, backend: String) -> BackgroundRemovalError {
        let detail = String(decoding: response.body.prefix(300), as: UTF8.self)
        if response.status >= 500 || response.status == 408 || response.status == 429 || response.status < 400 {
            return .transient(backend: backend, reason: "HTTP \(response.status): \(detail)")
        }
        return .rejected(backend: backend, status: response.status, reason: detail)
    }

    /// Transport failures move on to the next backend.
    static func forTransport(_ error: any Error, backend: String) -> BackgroundRemovalError {
        .transient(backend: backend, reason: "\(error)")
    }

    /// Sends a backend's request: transport failures and non-2xx answers become this error.
    static func send(_ request: HTTPClientRequest, with http: any HTTPClient, backend: String) async throws -> HTTPClientResponse {
        let response: HTTPClientResponse
        do {
            response = try await http.execute(request)
        } catch {
            throw forTransport(error, backend: backend)
        }
        guard response.isSuccess else { throw forStatus(response, backend: backend) }
        return response
    }

    /// Checks that an answer is a PNG before libvips sees it.
    static func requirePNG(_ data: Data, backend: String, contentType: String?) throws {
        guard data.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) else {
            throw BackgroundRemovalError.transient(
                backend: backend, reason: "answer is not a PNG (\(contentType ?? "no content type"), \(data.count) bytes)")
        }
    }
}
