import FleetHTTPClient
import FleetQueue
import FleetSupport
import Foundation

/// Sends one signed request to an allowed URL and says how it went, for both outbound kinds:
/// checks the URL (`OutboundPolicy`, DNS included) and connects to the address it checked,
/// follows no redirect, signs (`StandardWebhook`) with the job's stable `webhook-id` and this
/// attempt's time.
public struct SignedSender: Sendable {
    let http: any HTTPClient
    let policy: OutboundPolicy
    let signer: StandardWebhook
    let now: @Sendable () -> Date

    public init(http: any HTTPClient, policy: OutboundPolicy, signer: StandardWebhook, now: @escaping @Sendable () -> Date = Date.init) {
        self.http = http
        self.policy = policy
        self.signer = signer
        self.now = now
    }

    /// The status of a 2xx answer; any other end throws `OutboundFailure`.
    public func send(
        method: HTTPClientMethod, url: String, headers: [(name: String, value: String)], body: Data?, webhookID: String, timeout: Duration
    ) async throws(OutboundFailure) -> Int {
        let address: String?
        do { address = try await policy.pinnedAddress(for: url).address } catch { throw .refused(error) }
        var lines: [(name: String, value: String)] = [("User-Agent", "wearbloom-fleet")]
        if body != nil { lines.append(("Content-Type", "application/json")) }
        lines += headers
        lines += signer.headers(id: webhookID, timestamp: now(), body: body ?? Data())
        var request = HTTPClientRequest(
            method: method, url: url, headers: lines, body: body, timeout: timeout, maxResponseBytes: 1 << 20)
        request.followsRedirects = false
        request.pinnedAddress = address
        let response: HTTPClientResponse
        do {
            response = try await http.execute(request)
        } catch let error as HTTPClientError {
            switch error {
            case .timedOut(_, let after): throw .timedOut(after: after)
            default: throw .connectionFailed(error.description)
            }
        } catch {
            throw .connectionFailed("\(error)")
        }
        let prefix = OutboundFailure.printablePrefix(of: response.body)
        switch response.status {
        case 200..<300: return response.status
        case 300..<400: throw .redirected(status: response.status)
        case 429, 500...: throw .serverError(status: response.status, bodyPrefix: prefix)
        default: throw .clientError(status: response.status, bodyPrefix: prefix)
        }
    }
}

/// How a signed request failed; `isPermanent` ones end the job `dead` at once.
public enum OutboundFailure: Error, CodedError, CustomStringConvertible {
    case refused(OutboundRefusal)
    case redirected(status: Int)
    case clientError(status: Int, bodyPrefix: String)
    case serverError(status: Int, bodyPrefix: String)
    case timedOut(after: Duration)
    case connectionFailed(String)

    public var isPermanent: Bool {
        switch self {
        case .refused(let refusal): refusal.isPermanent
        case .redirected, .clientError: true
        case .serverError, .timedOut, .connectionFailed: false
        }
    }

    public var code: JobErrorCode {
        switch self {
        case .refused(let refusal): refusal.code
        case .redirected: .httpRedirect
        case .clientError: .httpClientError
        case .serverError: .httpServerError
        case .timedOut: .httpTimeout
        case .connectionFailed: .httpConnectionFailed
        }
    }

    public var description: String {
        switch self {
        case .refused(let refusal): "refused: \(refusal)"
        case .redirected(let status): "answered \(status), a redirect, which is never followed: give the final URL"
        case .clientError(let status, let prefix), .serverError(let status, let prefix): "answered \(status): \(prefix)"
        case .timedOut(let after): "no answer within \(after)"
        case .connectionFailed(let reason): reason
        }
    }

    /// What a handler throws: permanent failures as `JobError.permanent` (straight to `dead`),
    /// the others as themselves (retried with backoff, their code recorded).
    public var asJobError: any Error {
        isPermanent ? JobError.permanent(code: code, message: description) : self
    }

    /// The answer's first 256 bytes as text, control characters replaced, for the job's errors.
    static func printablePrefix(of body: Data) -> String {
        let text = String(decoding: body.prefix(256), as: UTF8.self)
        return String(String.UnicodeScalarView(text.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7f ? " " : $0 }))
    }
}

/// Runs `callback.deliver` jobs.
public struct CallbackDeliveryHandler: JobHandler {
    public let kind = JobKind.callbackDeliver
    let sender: SignedSender
    let timeout: Duration

    public init(sender: SignedSender, timeout: Duration) {
        self.sender = sender
        self.timeout = timeout
    }

    public func run(_ job: ClaimedJob, context: JobContext) async throws -> JSONValue? {
        let payload = try job.decodePayload(CallbackDeliveryPayload.self)
        do {
            let status = try await sender.send(
                method: .post, url: payload.url, headers: [], body: Data(payload.event.jsonText.utf8), webhookID: payload.webhookId, timeout: timeout)
            return .object(["status": .number(Double(status))])
        } catch {
            throw error.asJobError
        }
    }
}

/// Runs `http.request` jobs; their `webhook-id` is `msg_http_<id>`, the same on every attempt.
public struct HTTPRequestHandler: JobHandler {
    public let kind = JobKind.httpRequest
    let sender: SignedSender
    let secrets: [String: String]

    public init(sender: SignedSender, secrets: [String: String]) {
        self.sender = sender
        self.secrets = secrets
    }

    public func run(_ job: ClaimedJob, context: JobContext) async throws -> JSONValue? {
        let payload = try job.decodePayload(HTTPRequestPayload.self)
        let request: CheckedHTTPRequest
        do {
            request = try payload.request(policy: sender.policy, secrets: secrets)
        } catch {
            throw JobError.permanent(code: error.urlRefusal?.code ?? .malformedPayload, message: "\(error)")
        }
        do {
            let status = try await sender.send(
                method: request.method, url: request.url, headers: request.headers, body: request.body, webhookID: "msg_http_\(job.id)",
                timeout: request.timeout)
            return .object(["status": .number(Double(status))])
        } catch {
            throw error.asJobError
        }
    }
}

extension HTTPRequestPayloadError {
    var urlRefusal: OutboundRefusal? { if case .urlRefused(let refusal) = self { refusal } else { nil } }
}
