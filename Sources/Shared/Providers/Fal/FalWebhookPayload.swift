import FleetSupport
import Foundation

/// The JSON fal POSTs to the `fal_webhook` URL when a request finishes (verify it first with
/// `FalWebhookVerifier`). Handle it idempotently on `requestID`: fal redelivers for two hours.
public struct FalWebhookPayload: Decodable, Sendable, Equatable {
    public enum Status: String, Decodable, Sendable { case ok = "OK", error = "ERROR" }

    public var requestID: String
    /// The last attempt's id after an internal fal retry; usually equal to `requestID`.
    public var gatewayRequestID: String?
    public var status: Status
    /// Set with `ERROR`, e.g. "Invalid status code: 422".
    public var error: String?
    /// Set with `OK` when the output could not be serialised (`payload` is then null).
    public var payloadError: String?
    /// The model's output (`OK`) or the error body (`ERROR`), as sent.
    public var payload: JSONValue?

    enum CodingKeys: String, CodingKey {
        case requestID = "request_id", gatewayRequestID = "gateway_request_id", status, error
        case payloadError = "payload_error", payload
    }

    public static func decode(_ body: Data) throws(ProviderError) -> FalWebhookPayload {
        try ProviderJSON.decode(FalWebhookPayload.self, from: body, what: "fal webhook", provider: "fal")
    }

    /// The outcome as a try-on result (both fal try-on models answer `images[0]`).
    public func tryOnResult(provider: String) throws(ProviderError) -> ProviderResult {
        let body = payload.flatMap { try? JSONEncoder().encode($0) } ?? Data()
        switch status {
        case .ok:
            guard payload != nil, payload != .null else {
                let reason = payloadError.map { ProviderText.bounded($0) } ?? "the webhook carried no output"
                return .failed(ProviderFailure(code: "payload_error", message: reason, retryable: false))
            }
            return try FalImagesOutput.result(from: body, provider: provider)
        case .error:
            let parsed = FalErrorBody.parse(body)
            let status = error.flatMap(FalWebhookPayload.statusCode(in:))
            return .failed(ProviderFailure(
                code: parsed?.code ?? status.map { "http_\($0)" } ?? "error",
                message: ProviderText.bounded(parsed?.message ?? error ?? "fal reported an error"),
                retryable: status.map(HTTPStatus.isTransient) ?? false))
        }
    }

    /// The status in fal's "Invalid status code: 422".
    static func statusCode(in error: String) -> Int? {
        error.split(whereSeparator: { !$0.isNumber }).last.flatMap { Int($0) }.flatMap { (100...599).contains($0) ? $0 : nil }
    }
}
