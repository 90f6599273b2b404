import FleetHTTPClient

/// Why an S3 request failed: the store's own answer (its error XML's `Code`, `Message` and
/// `RequestId`), or the transport's. Never the object key, the bucket's listing or a credential:
/// the description may go to a log or a job's errors as it is.
public struct S3Error: Error, CustomStringConvertible, Sendable, Equatable {
    /// What the caller can do about it.
    public enum Kind: Sendable, Equatable {
        /// No object at the key (404 `NoSuchKey`, or a HEAD's bare 404).
        case notFound
        /// The bucket does not exist (404 `NoSuchBucket`): a deployment's mistake.
        case noSuchBucket
        /// The keys are wrong, expired, or may not do this (403).
        case denied
        /// A conditional write found an object there (412 `PreconditionFailed`).
        case alreadyExists
        /// The store did not answer usefully, after the retries the policy allows: 5xx, a reset,
        /// a timeout.
        case unavailable
        /// The answer's body was larger than the caller's bound.
        case tooLarge
        /// Any other refusal (400s): the request's fault, not worth retrying.
        case refused
    }

    public let kind: Kind
    /// The request's method and what it was for (`GET object`, `ListObjectsV2`).
    public let operation: String
    /// The HTTP status; nil when no answer came.
    public let status: Int?
    /// The store's code (`SlowDown`, `AccessDenied`) or the transport's (`Timeout`, `ConnectionFailed`).
    public let code: String
    public let message: String
    /// The store's request id (`x-amz-request-id`), which its operators can look up.
    public let requestID: String?

    public init(kind: Kind, operation: String, status: Int?, code: String, message: String, requestID: String? = nil) {
        self.kind = kind
        self.operation = operation
        self.status = status
        self.code = code
        self.message = message
        self.requestID = requestID
    }

    /// The error of a non-2xx answer, from its error XML when it has one (a HEAD's answer has no body).
    init(operation: String, response: HTTPClientResponse) {
        let xml = String(decoding: response.body, as: UTF8.self)
        let code = S3XML.value(of: "Code", in: xml) ?? Self.defaultCode(status: response.status)
        let kind: Kind = switch (response.status, code) {
        case (404, "NoSuchBucket"): .noSuchBucket
        case (404, _): .notFound
        case (403, _): .denied
        case (412, _): .alreadyExists
        case (500..., _), (429, _): .unavailable
        default: .refused
        }
        self.init(
            kind: kind, operation: operation, status: response.status, code: code,
            message: S3XML.value(of: "Message", in: xml) ?? "",
            requestID: S3XML.value(of: "RequestId", in: xml) ?? response.headers["x-amz-request-id"])
    }

    /// The error of a request that got no answer.
    init(operation: String, transport: HTTPClientError) {
        let (kind, code): (Kind, String) = switch transport {
        case .timedOut: (.unavailable, "Timeout")
        case .connectionFailed, .cancelled: (.unavailable, "ConnectionFailed")
        case .tlsFailure: (.unavailable, "TLSFailure")
        case .responseTooLarge: (.tooLarge, "ResponseTooLarge")
        case .invalidRequest: (.refused, "InvalidRequest")
        }
        // HTTPClientError names the URL, whose path holds the object key: only the reason is kept.
        let reason: String = switch transport {
        case .timedOut(_, let after): "no answer within \(after)"
        case .connectionFailed(_, let reason), .tlsFailure(_, let reason): reason
        case .responseTooLarge(_, let limit): "answer larger than \(limit) bytes"
        case .invalidRequest(let reason): reason
        case .cancelled: "cancelled"
        }
        self.init(kind: kind, operation: operation, status: nil, code: code, message: reason)
    }

    /// Whether another try may succeed: 500, 502, 503 (`SlowDown`), 504, 429, a reset, a timeout.
    var isRetryable: Bool { kind == .unavailable }

    private static func defaultCode(status: Int) -> String {
        switch status {
        case 404: "NotFound"
        case 403: "Forbidden"
        case 412: "PreconditionFailed"
        case 503: "ServiceUnavailable"
        default: "HTTP\(status)"
        }
    }

    public var description: String {
        let answer = status.map { "HTTP \($0) " } ?? ""
        let request = requestID.map { " (request \($0))" } ?? ""
        return "S3 \(operation): \(answer)\(code)\(message.isEmpty ? "" : ": \(message)")\(request)"
    }
}
