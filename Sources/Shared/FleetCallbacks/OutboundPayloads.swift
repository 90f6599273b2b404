import FleetHTTPClient
import FleetQueue
import FleetSupport
import Foundation

extension JobKind {
    public static let callbackDeliver: JobKind = "callback.deliver"
    public static let httpRequest: JobKind = "http.request"
}

extension JobErrorCode {
    /// The URL is not one the fleet may call (`OutboundPolicy`): never retried.
    public static let urlRefused = Self(rawValue: "URL_REFUSED")
    /// The receiver answered 3xx: redirects are never followed, so the URL must be fixed.
    public static let httpRedirect = Self(rawValue: "HTTP_REDIRECT")
    /// The receiver answered 4xx (not 429): it refused the request; never retried.
    public static let httpClientError = Self(rawValue: "HTTP_CLIENT_ERROR")
    /// The receiver answered 5xx or 429: retried with backoff.
    public static let httpServerError = Self(rawValue: "HTTP_SERVER_ERROR")
    /// No answer within the timeout: retried with backoff.
    public static let httpTimeout = Self(rawValue: "HTTP_TIMEOUT")
    /// No connection, a broken one, or a name that did not resolve: retried with backoff.
    public static let httpConnectionFailed = Self(rawValue: "HTTP_CONNECTION_FAILED")
}

/// `callback.deliver`: one signed POST of a finished render's or job's event to the URL its
/// requester gave. Enqueued by the database itself, in the transaction that ends the render or
/// job (the `renders_callback` and `jobs_callback` triggers, `docs/schema.md`), so no ending is
/// ever without its callback, whoever ended it.
public struct CallbackDeliveryPayload: JobPayload {
    public static let kind = JobKind.callbackDeliver
    public static let summary = "POSTs a finished render's or job's signed event to its callbackUrl"

    public let url: String
    /// The `webhook-id`: the same on every attempt, so receivers drop repeats.
    public let webhookId: String
    /// The JSON event, sent as the body.
    public let event: JSONValue

    public init(url: String, webhookId: String, event: JSONValue) {
        self.url = url
        self.webhookId = webhookId
        self.event = event
    }
}

/// `http.request`: one signed call of a backend's endpoint, with the queue's retries and the
/// schedule's clock (`0 3 * * * => http.request {"url": "https://api…/cron/trial-expiry"}`).
public struct HTTPRequestPayload: JobPayload {
    public static let kind = JobKind.httpRequest
    public static let summary = "calls an allowed URL, signed: 2xx completes, 5xx/429/timeout retries, 4xx ends dead"

    /// GET, POST (the default), PUT, PATCH or DELETE.
    public var method: String?
    public var url: String
    /// Plain header values; never a secret (the payload is stored and shown by `status`).
    public var headers: [String: String]?
    /// Header name → the name of a secret in `FLEET_OUTBOUND_SECRETS`, whose value is sent.
    public var secretHeaders: [String: String]?
    /// Sent as JSON (`Content-Type: application/json`); none: no body.
    public var body: JSONValue?
    /// 100–120000; default 10000.
    public var timeoutMs: Int?

    public init(method: String? = nil, url: String, headers: [String: String]? = nil, secretHeaders: [String: String]? = nil,
                body: JSONValue? = nil, timeoutMs: Int? = nil) {
        self.method = method
        self.url = url
        self.headers = headers
        self.secretHeaders = secretHeaders
        self.body = body
        self.timeoutMs = timeoutMs
    }

    public static let timeoutRange = 100...120_000
    public static let defaultTimeoutMs = 10_000
    /// Headers the fleet sets itself: a payload may not name them.
    static let reservedHeaders: Set<String> = [
        StandardWebhook.Header.id, StandardWebhook.Header.timestamp, StandardWebhook.Header.signature,
        "host", "content-length", "content-type", "transfer-encoding", "connection", "expect",
    ]

    /// The request to send, checked: what `enqueue` checks before accepting the job and the
    /// handler again before sending it (settings may have changed meanwhile). Secret values
    /// are looked up here and appear in no error message.
    public func request(policy: OutboundPolicy, secrets: [String: String]) throws(HTTPRequestPayloadError) -> CheckedHTTPRequest {
        guard let verb = HTTPClientMethod(rawValue: (method ?? "POST").uppercased()) else {
            throw .invalid("method '\(method ?? "")' is not one of GET, POST, PUT, PATCH, DELETE")
        }
        do { _ = try policy.destination(of: url) } catch { throw .urlRefused(error) }
        let timeout = timeoutMs ?? Self.defaultTimeoutMs
        guard Self.timeoutRange.contains(timeout) else { throw .invalid("timeoutMs \(timeout) is outside \(Self.timeoutRange)") }
        if verb == .get, body != nil { throw .invalid("a GET has no body") }
        var lines: [(name: String, value: String)] = []
        for (name, value) in (headers ?? [:]).sorted(by: { $0.key < $1.key }) {
            try Self.checkHeader(name: name, value: value)
            lines.append((name, value))
        }
        for (name, secretName) in (secretHeaders ?? [:]).sorted(by: { $0.key < $1.key }) {
            guard let value = secrets[secretName] else { throw .invalid("secretHeaders.\(name): no secret '\(secretName)' in FLEET_OUTBOUND_SECRETS") }
            try Self.checkHeader(name: name, value: value, secret: true)
            lines.append((name, value))
        }
        return CheckedHTTPRequest(method: verb, url: url, headers: lines, body: body.map { Data($0.jsonText.utf8) }, timeout: .milliseconds(timeout))
    }

    private static func checkHeader(name: String, value: String, secret: Bool = false) throws(HTTPRequestPayloadError) {
        let tokenCharacters = Set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
        guard !name.isEmpty, name.count <= 128, name.allSatisfy(tokenCharacters.contains) else { throw .invalid("header name '\(name.prefix(128))' is not a token") }
        guard !reservedHeaders.contains(name.lowercased()) else { throw .invalid("header \(name) is set by the fleet") }
        guard value.utf8.count <= 8192, !value.unicodeScalars.contains(where: { $0.value < 0x20 && $0 != "\t" || $0.value == 0x7f }) else {
            throw .invalid(secret ? "header \(name): its secret holds control characters" : "header \(name): control characters in its value")
        }
    }
}

/// `HTTPClientRequest.Method` under a name this module's callers read without FleetHTTPClient.
public typealias HTTPClientMethod = HTTPClientRequest.Method

/// An `http.request` ready to send: method, URL, headers with secrets filled in, body.
public struct CheckedHTTPRequest: Sendable {
    public let method: HTTPClientMethod
    public let url: String
    public let headers: [(name: String, value: String)]
    public let body: Data?
    public let timeout: Duration
}

public enum HTTPRequestPayloadError: Error, CustomStringConvertible {
    case invalid(String)
    case urlRefused(OutboundRefusal)

    public var description: String {
        switch self {
        case .invalid(let reason): reason
        case .urlRefused(let refusal): "url: \(refusal)"
        }
    }
}
