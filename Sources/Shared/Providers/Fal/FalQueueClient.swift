import FleetHTTPClient
import FleetSupport
import Foundation

/// The URLs fal returns on submit; status, result and cancel use them as given (they drop the
/// model's subpath, which only submit carries).
public struct FalQueueURLs: Sendable, Codable, Equatable {
    public var status: String
    public var response: String
    public var cancel: String

    public init(status: String, response: String, cancel: String) {
        self.status = status
        self.response = response
        self.cancel = cancel
    }
}

/// fal's queue API (`queue.fal.run`), shared by every fal model: submit, status, result, cancel.
public struct FalQueueClient: Sendable {
    public static let defaultBaseURL = "https://queue.fal.run"

    public enum Status: Sendable, Equatable {
        case inQueue(position: Int?)
        case inProgress
        /// Finished, successfully or not: the result endpoint tells which.
        case completed
    }

    public enum CancelOutcome: Sendable, Equatable {
        case requested
        case alreadyCompleted
        case notSent(String)
    }

    /// Names the provider in errors.
    public let provider: String
    private let key: String
    private let baseURL: String
    private let http: any HTTPClient

    public init(provider: String, key: String, baseURL: String = FalQueueClient.defaultBaseURL, http: any HTTPClient) {
        self.provider = provider
        self.key = key
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.http = http
    }

    /// Submits `input` (the model's input object, encoded as is) to `{base}/{endpoint}`.
    public func submit(
        endpoint: String, input: Data, webhookURL: String?, timeout: Duration
    ) async throws(ProviderError) -> (requestID: String, urls: FalQueueURLs) {
        var url = "\(baseURL)/\(endpoint)"
        if let webhookURL { url += "?fal_webhook=\(FalQueueClient.queryEncoded(Self.traced(webhookURL)))" }
        let response = try await send(.json(.post, url: url, body: input, timeout: timeout))
        guard response.isSuccess else { throw failure(response).error }
        let submitted = try ProviderJSON.decode(Submitted.self, from: response.body, what: "submit response", provider: provider)
        let urls = FalQueueURLs(status: submitted.statusURL, response: submitted.responseURL, cancel: submitted.cancelURL)
        // The key goes to every URL fal returns: they must stay on fal's queue host.
        for returned in [urls.status, urls.response, urls.cancel] where !sameOrigin(returned) {
            throw ProviderError.malformedResponse(provider: provider, reason: "submit returned a URL outside \(HTTPClientError.redacted(baseURL))")
        }
        return (submitted.requestID, urls)
    }

    public func status(_ urls: FalQueueURLs, timeout: Duration = .seconds(10)) async throws(ProviderError) -> Status {
        let response = try await send(HTTPClientRequest(url: urls.status, headers: [("Accept", "application/json")], timeout: timeout))
        guard response.isSuccess else { throw failure(response).error }
        let status = try ProviderJSON.decode(StatusBody.self, from: response.body, what: "status response", provider: provider)
        switch status.status {
        case "IN_QUEUE": return .inQueue(position: status.queuePosition)
        case "IN_PROGRESS": return .inProgress
        case "COMPLETED": return .completed
        default: throw ProviderError.malformedResponse(provider: provider, reason: "unknown queue status '\(ProviderText.bounded(status.status, limit: 40))'")
        }
    }

    /// The model's output JSON of a completed request, or how it failed. Only the exchange
    /// failing (no answer, unreadable answer) throws.
    public func output(_ urls: FalQueueURLs, timeout: Duration = .seconds(20)) async throws(ProviderError) -> Result<Data, ProviderFailure> {
        let response = try await send(HTTPClientRequest(url: urls.response, headers: [("Accept", "application/json")], timeout: timeout))
        return response.isSuccess ? .success(response.body) : .failure(failure(response).failure)
    }

    /// Status, then the output once completed, as a try-on result (`images[0]`).
    public func tryOnResult(_ urls: FalQueueURLs) async throws(ProviderError) -> ProviderResult {
        guard try await status(urls) == .completed else { return .pending }
        switch try await output(urls) {
        case .success(let body): return try FalImagesOutput.result(from: body, provider: provider)
        case .failure(let failure): return .failed(failure)
        }
    }

    /// `PUT cancel_url`: fal accepts it only while the request waits in the queue.
    public func cancel(_ urls: FalQueueURLs) async -> CancelOutcome {
        let response: HTTPClientResponse
        do {
            response = try await send(HTTPClientRequest(method: .put, url: urls.cancel, headers: [("Accept", "application/json")], timeout: .seconds(10)))
        } catch {
            return .notSent(error.description)
        }
        let body = try? JSONDecoder().decode(CancelBody.self, from: response.body)
        if body?.status == "ALREADY_COMPLETED" { return .alreadyCompleted }
        return response.isSuccess ? .requested : .notSent(failure(response).error.description)
    }

    private func send(_ request: HTTPClientRequest) async throws(ProviderError) -> HTTPClientResponse {
        var request = request
        request.headers.append(("Authorization", "Key \(key)"))
        return try await http.send(request, provider: provider)
    }

    private func failure(_ response: HTTPClientResponse) -> (error: ProviderError, failure: ProviderFailure) {
        let body = FalErrorBody.parse(response.body)
        let retryable = response.headers["x-fal-retryable"].map { $0.lowercased() == "true" }
        let message = body?.message ?? ProviderText.excerpt(response.body)
        let failure = ProviderFailure(
            code: response.headers["x-fal-error-type"] ?? body?.code ?? "http_\(response.status)",
            message: ProviderText.bounded(message), retryable: retryable ?? HTTPStatus.isTransient(response.status))
        return (ProviderError.from(status: response.status, message: message, retryable: retryable, provider: provider, headers: response.headers), failure)
    }

    private func sameOrigin(_ url: String) -> Bool {
        guard let base = URLComponents(string: baseURL), let other = URLComponents(string: url) else { return false }
        return base.scheme == other.scheme && base.host == other.host && base.port == other.port
    }

    /// A query value: everything but unreserved characters percent-encoded.
    /// The webhook URL with the current span's `traceparent` in its query: fal calls it back as
    /// given and carries no trace context of its own, so this is how the dispatcher's `provider
    /// webhook` span joins the render's trace. Unchanged with tracing off.
    static func traced(_ webhookURL: String) -> String {
        guard let traceParent = TracePropagation.traceParent() else { return webhookURL }
        return webhookURL + (webhookURL.contains("?") ? "&" : "?") + "\(TracePropagation.header)=\(queryEncoded(traceParent))"
    }

    static func queryEncoded(_ value: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return value.addingPercentEncoding(withAllowedCharacters: allowed) ?? value
    }

    private struct Submitted: Decodable {
        var requestID: String
        var statusURL: String
        var responseURL: String
        var cancelURL: String

        enum CodingKeys: String, CodingKey {
            case requestID = "request_id", statusURL = "status_url", responseURL = "response_url", cancelURL = "cancel_url"
        }
    }

    private struct StatusBody: Decodable {
        var status: String
        var queuePosition: Int?

        enum CodingKeys: String, CodingKey { case status, queuePosition = "queue_position" }
    }

    private struct CancelBody: Decodable { var status: String? }
}

/// fal's error bodies: `{"detail":[{"loc":[…],"msg":…,"type":…}]}` (validation),
/// `{"detail":"…","error_type":"…"}` (infrastructure), sometimes a `message`.
struct FalErrorBody: Decodable, Equatable {
    var message: String
    var code: String?

    static func parse(_ body: Data) -> FalErrorBody? { try? JSONDecoder().decode(FalErrorBody.self, from: body) }

    private struct Item: Decodable {
        var loc: [Location]?
        var msg: String?
        var type: String?
    }

    /// `loc` mixes names and array indices.
    private enum Location: Decodable, CustomStringConvertible {
        case name(String), index(Int)
        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let index = try? container.decode(Int.self) { self = .index(index) } else { self = .name(try container.decode(String.self)) }
        }
        var description: String { switch self { case .name(let name): name; case .index(let index): String(index) } }
    }

    private enum CodingKeys: String, CodingKey { case detail, message, errorType = "error_type" }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let errorType = try? container.decodeIfPresent(String.self, forKey: .errorType)
        if let items = try? container.decode([Item].self, forKey: .detail), !items.isEmpty {
            message = items.map { item in
                let location = (item.loc ?? []).map(\.description).joined(separator: ".")
                return location.isEmpty ? (item.msg ?? "invalid") : "\(location): \(item.msg ?? "invalid")"
            }.joined(separator: "; ")
            code = errorType ?? items.first?.type
        } else if let detail = try? container.decode(String.self, forKey: .detail) {
            message = detail
            code = errorType
        } else if let text = try? container.decode(String.self, forKey: .message) {
            message = text
            code = errorType
        } else {
            throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "no detail or message"))
        }
    }
}

/// The output of fal's image models: `{"images":[{"url":…,"content_type":…}], …}`.
struct FalImagesOutput: Decodable {
    struct File: Decodable { var url: String }
    var images: [File]

    static func result(from body: Data, provider: String) throws(ProviderError) -> ProviderResult {
        let output = try ProviderJSON.decode(FalImagesOutput.self, from: body, what: "model output", provider: provider)
        guard let first = output.images.first, !first.url.isEmpty else {
            return .failed(ProviderFailure(code: "no_image", message: "the model returned no image", retryable: false))
        }
        return .succeeded(.url(first.url))
    }
}
