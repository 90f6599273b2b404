import Foundation

/// One outbound HTTP request to a provider.
public struct HTTPClientRequest: Sendable {
    public enum Method: String, Sendable {
        case get = "GET", head = "HEAD", post = "POST", put = "PUT", patch = "PATCH", delete = "DELETE"
    }

    public var method: Method
    public var url: String
    /// Header lines in order; names are sent as given.
    public var headers: [(name: String, value: String)]
    public var body: Data?
    /// The whole exchange (connect, send, wait, receive) must end within this.
    public var timeout: Duration
    /// A response body larger than this ends the request with `responseTooLarge`.
    public var maxResponseBytes: Int
    /// Whether a 3xx is followed (at most 5 hops). Calls to URLs the fleet was given by others
    /// (callbacks, HTTP jobs) set false: a redirect would lead past the checks made on the URL.
    public var followsRedirects = true
    /// The IP address to connect to instead of resolving the URL's host (the host is still what
    /// TLS verifies and `Host` names): the address a caller resolved and checked itself, so the
    /// name cannot resolve elsewhere between the check and the connection.
    public var pinnedAddress: String?
    /// Whether sending it twice does no more than sending it once. By default a POST is not (a
    /// provider's submit or prediction is paid once per request that reaches it) and GET, HEAD, PUT
    /// and DELETE are; set it when the method says otherwise. Once any of a non-idempotent request's
    /// body went out, the transport never sends it again, only its caller may (`CurlHTTPClient`);
    /// a GET may always be re-sent.
    public var isIdempotent: Bool {
        get { idempotence ?? (method != .post) }
        set { idempotence = newValue }
    }
    /// Set by the caller; nil follows the method, whatever it is changed to.
    private var idempotence: Bool?

    public init(
        method: Method = .get,
        url: String,
        headers: [(name: String, value: String)] = [],
        body: Data? = nil,
        timeout: Duration = .seconds(30),
        maxResponseBytes: Int = 32 << 20
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeout = timeout
        self.maxResponseBytes = maxResponseBytes
    }

    /// A JSON POST (or other method) of an encodable body.
    public static func json(
        _ method: Method, url: String, body: Data, headers: [(name: String, value: String)] = [],
        timeout: Duration = .seconds(30)
    ) -> HTTPClientRequest {
        HTTPClientRequest(
            method: method, url: url,
            headers: [("Content-Type", "application/json"), ("Accept", "application/json")] + headers,
            body: body, timeout: timeout
        )
    }
}

public struct HTTPClientResponse: Sendable {
    public var status: Int
    /// Header names lower-cased; a repeated header keeps its last value.
    public var headers: [String: String]
    public var body: Data

    public init(status: Int, headers: [String: String] = [:], body: Data = Data()) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    public var isSuccess: Bool { (200..<300).contains(status) }
    /// A server-side fault: worth another try, possibly elsewhere.
    public var isServerError: Bool { status >= 500 }
}

/// Why a request produced no response. Every case is transient from the caller's point of
/// view except `invalidRequest` and `responseTooLarge`.
public enum HTTPClientError: Error, Equatable, CustomStringConvertible {
    case invalidRequest(String)
    case timedOut(url: String, after: Duration)
    case connectionFailed(url: String, reason: String)
    case responseTooLarge(url: String, limit: Int)
    case tlsFailure(url: String, reason: String)
    case cancelled(url: String)

    /// True when trying again (or another backend) may succeed.
    public var isTransient: Bool {
        switch self {
        case .timedOut, .connectionFailed, .cancelled: true
        case .invalidRequest, .responseTooLarge, .tlsFailure: false
        }
    }

    public var description: String {
        switch self {
        case .invalidRequest(let reason): "invalid HTTP request: \(reason)"
        case .timedOut(let url, let after): "\(HTTPClientError.redacted(url)) timed out after \(after)"
        case .connectionFailed(let url, let reason): "\(HTTPClientError.redacted(url)): connection failed: \(reason)"
        case .responseTooLarge(let url, let limit): "\(HTTPClientError.redacted(url)): response larger than \(limit) bytes"
        case .tlsFailure(let url, let reason): "\(HTTPClientError.redacted(url)): TLS failure: \(reason)"
        case .cancelled(let url): "\(HTTPClientError.redacted(url)): cancelled"
        }
    }

    /// URLs may carry secrets in their query (webhook tokens): errors name only scheme, host and path.
    package static func redacted(_ url: String) -> String {
        guard let components = URLComponents(string: url) else { return "<url>" }
        var safe = URLComponents()
        safe.scheme = components.scheme
        safe.host = components.host
        safe.port = components.port
        safe.path = components.path
        return safe.string ?? "<url>"
    }
}

/// The seam between provider clients and the transport: `CurlHTTPClient` in production.
public protocol HTTPClient: Sendable {
    func execute(_ request: HTTPClientRequest) async throws -> HTTPClientResponse
}
