import FleetHTTPClient
import FleetSupport
import Foundation
import Metrics

/// Why a provider call produced no usable answer. Messages name the provider and what went wrong,
/// never a key, a token or an image.
public enum ProviderError: CodedError, Equatable, CustomStringConvertible {
    /// 5xx, 408, a dropped connection or a timeout: the same call may succeed once more.
    case transient(provider: String, reason: String)
    /// 429 (Google's `RESOURCE_EXHAUSTED` too): the provider's capacity, not a fault. Not the
    /// render's one retry: it waits (`retryAfter`, the provider's `Retry-After` when it sent one)
    /// and asks again within its deadline, and the fleet lowers the provider's rate.
    case rateLimited(provider: String, retryAfter: Duration?)
    /// The provider refused the request (a 4xx such as 422): the same input fails the same way.
    case rejected(provider: String, status: Int, message: String)
    /// Credentials refused (401/403) or no access token could be obtained.
    case unauthorized(provider: String, reason: String)
    /// The provider answered with something its API does not document.
    case malformedResponse(provider: String, reason: String)
    /// The request named a category this provider cannot render.
    case unsupportedCategory(provider: String, GarmentCategory)
    /// The exchange could not be made and trying again will not help (TLS, oversize answer…).
    case failed(provider: String, reason: String)

    /// True when calling again may succeed (a submit retries a fault once, and waits out a rate limit).
    public var isTransient: Bool {
        switch self {
        case .transient, .rateLimited: true
        default: false
        }
    }

    /// A 429: how long the provider asked to wait (nil: it did not say); nil for other errors.
    public var rateLimitedFor: Duration?? {
        if case .rateLimited(_, let retryAfter) = self { retryAfter } else { nil }
    }

    /// True when the provider answered something its API does not document (an HTML page, a
    /// truncated body, wrong types): a provider fault, read once more and then given up.
    public var isMalformed: Bool {
        if case .malformedResponse = self { true } else { false }
    }

    /// The product error code a render failing with this error ends with, as its job records it.
    public var code: JobErrorCode {
        JobErrorCode(rawValue: (isUnsupportedCategory ? RenderErrorCode.invalidCategory : .renderFailed).rawValue)
    }

    private var isUnsupportedCategory: Bool {
        if case .unsupportedCategory = self { true } else { false }
    }

    public var description: String {
        switch self {
        case .transient(let provider, let reason): "\(provider): temporary failure: \(reason)"
        case .rateLimited(let provider, let retryAfter):
            "\(provider): rate limited (HTTP 429)\(retryAfter.map { ", retry after \(Int($0.seconds.rounded(.up))) s" } ?? "")"
        case .rejected(let provider, let status, let message): "\(provider): request rejected (HTTP \(status)): \(message)"
        case .unauthorized(let provider, let reason): "\(provider): not authorised: \(reason)"
        case .malformedResponse(let provider, let reason): "\(provider): malformed response: \(reason)"
        case .unsupportedCategory(let provider, let category): "\(provider): garment category \(category.rawValue) is not supported"
        case .failed(let provider, let reason): "\(provider): \(reason)"
        }
    }
}

extension ProviderError {
    /// Classifies a non-2xx answer. `retryable` is the provider's own verdict when it sends one
    /// (fal's `X-Fal-Retryable`); it overrides the status class. Counted in
    /// `fleet_render_provider_http_errors_total{provider,status}` (429: the provider's rate limit).
    static func from(status: Int, message: String, retryable: Bool? = nil, provider: String, headers: [String: String] = [:]) -> ProviderError {
        Counter(label: "fleet_render_provider_http_errors_total", dimensions: [("provider", provider), ("status", "\(status)")]).increment()
        if status == 429 { return .rateLimited(provider: provider, retryAfter: headers["retry-after"].flatMap(Self.retryAfter)) }
        let message = ProviderText.bounded(message)
        if retryable ?? HTTPStatus.isTransient(status) {
            return .transient(provider: provider, reason: "HTTP \(status): \(message)")
        }
        if status == 401 || status == 403 { return .unauthorized(provider: provider, reason: "HTTP \(status): \(message)") }
        return .rejected(provider: provider, status: status, message: message)
    }

    /// `Retry-After` in seconds (the HTTP-date form is not used by these providers), at most a minute.
    static func retryAfter(_ value: String) -> Duration? {
        Double(value.trimmingCharacters(in: .whitespaces)).map { .seconds(min(60, max(0, $0))) }
    }

    /// A request that produced no response.
    static func from(_ error: HTTPClientError, provider: String) -> ProviderError {
        error.isTransient ? .transient(provider: provider, reason: error.description) : .failed(provider: provider, reason: error.description)
    }
}

public enum HTTPStatus {
    /// Worth another try: server faults, request timeout, rate limiting.
    static func isTransient(_ status: Int) -> Bool { status >= 500 || status == 408 || status == 429 }

    /// A verdict on the request's content (a bad or refused image), as opposed to the fleet
    /// asking wrongly (an unknown endpoint or model: 404, 405).
    public static func refusesInput(_ status: Int) -> Bool { [400, 413, 415, 422].contains(status) }
}

enum ProviderText {
    /// Provider messages go into logs and error columns: one line, bounded, and without anything
    /// shaped like a credential (an error body may echo the request's `Authorization`).
    static func bounded(_ text: String, limit: Int = 400) -> String {
        let line = SecretRedaction.redact(text).split(whereSeparator: \.isNewline).joined(separator: " ").trimmingCharacters(in: .whitespaces)
        return line.count > limit ? String(line.prefix(limit)) + "…" : line
    }

    /// A short, printable excerpt of a body that failed to parse.
    static func excerpt(_ body: Data) -> String {
        body.isEmpty ? "empty body" : "body starts '\(bounded(String(decoding: body.prefix(120), as: UTF8.self), limit: 120))'"
    }
}

extension HTTPClient {
    /// `execute` with transport errors classified for `provider`.
    func send(_ request: HTTPClientRequest, provider: String) async throws(ProviderError) -> HTTPClientResponse {
        do {
            return try await execute(request)
        } catch let error as HTTPClientError {
            throw ProviderError.from(error, provider: provider)
        } catch is CancellationError {
            throw ProviderError.transient(provider: provider, reason: "cancelled")
        } catch {
            throw ProviderError.transient(provider: provider, reason: "\(error)")
        }
    }
}

/// JSON decoding whose failure becomes `.malformedResponse` naming what was expected.
enum ProviderJSON {
    static func decode<T: Decodable>(
        _ type: T.Type, from body: Data, what: String, provider: String,
        keys: JSONDecoder.KeyDecodingStrategy = .useDefaultKeys
    ) throws(ProviderError) -> T {
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = keys
        do {
            return try decoder.decode(type, from: body)
        } catch {
            throw ProviderError.malformedResponse(provider: provider, reason: "\(what) is not the documented JSON (\(ProviderJSON.reason(error))); \(ProviderText.excerpt(body))")
        }
    }

    /// The useful part of a DecodingError: which key or value was wrong.
    private static func reason(_ error: any Error) -> String {
        guard let error = error as? DecodingError else { return "\(error)" }
        switch error {
        case .keyNotFound(let key, let context): return "missing \(path(context.codingPath + [key]))"
        case .typeMismatch(_, let context), .valueNotFound(_, let context): return "unexpected value at \(path(context.codingPath))"
        case .dataCorrupted(let context): return context.codingPath.isEmpty ? "not JSON" : "bad value at \(path(context.codingPath))"
        @unknown default: return "\(error)"
        }
    }

    private static func path(_ keys: [any CodingKey]) -> String {
        keys.map { $0.intValue.map(String.init) ?? $0.stringValue }.joined(separator: ".")
    }
}
