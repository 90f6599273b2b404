import CSodium
import Crypto
import FleetHTTPClient
import Foundation
import Hummingbird
import Synchronization

/// fal's queue API on loopback (docs/providers.md, sections 1 and 2): submit, status, result
/// and cancel on the URLs it returns, the rendered image at `/files/…`, signed webhooks and the
/// JWKS at `/.well-known/jwks.json`. Jobs advance with the clock, not with sleeping tasks, so
/// hundreds can be in flight.
public final class FakeFal: Sendable {
    /// How the fake answers; read when a request arrives (a job keeps what was set at its submit).
    public struct Behavior: Sendable {
        /// From submit to `COMPLETED`: the first fifth `IN_QUEUE`, the rest `IN_PROGRESS`.
        public var latency: Duration = .milliseconds(100)
        /// The next N submits answer 503 (`runner_disconnected`) before any succeeds.
        public var transientSubmitFailures = 0
        /// Submits answered 429 (fal's rate limit) with `Retry-After: retryAfterSeconds`, before any 503.
        public var rateLimitedSubmits = 0
        public var retryAfterSeconds = 1
        /// Submits answer 422 with this validation detail.
        public var rejection: Rejection?
        /// The job completes but its result endpoint answers this error.
        public var jobFailure: JobFailure?
        /// Jobs stay `IN_PROGRESS` for ever and send no webhook.
        public var neverFinish = false
        /// These endpoints answer 200 with this garbage instead of their JSON. A garbled submit
        /// still queues the job, as fal may have done behind a proxy's error page.
        public var malformed: [Endpoint: Garbage] = [:]
        public var resultImage = FakeImages.jpeg

        public init() {}
    }

    public enum Endpoint: Sendable, Hashable { case submit, status, result }

    public struct Rejection: Sendable {
        public var field: String
        public var message: String
        public init(field: String, message: String) {
            self.field = field
            self.message = message
        }
    }

    public struct JobFailure: Sendable {
        public var status: Int
        public var errorType: String
        public var detail: String
        /// Sent as `X-Fal-Retryable` when set.
        public var retryable: Bool?
        public init(status: Int, errorType: String, detail: String, retryable: Bool? = nil) {
            self.status = status
            self.errorType = errorType
            self.detail = detail
            self.retryable = retryable
        }
    }

    /// One delivered webhook: where, what, and how the receiver answered (nil: no answer).
    public struct Delivery: Sendable {
        public var url: String
        public var body: Data
        public var status: Int?
    }

    public let key: String
    public let userID = "fake-fal-user"
    private let server: FakeServer
    private let webhookClient: (any HTTPClient)?
    private let recordRequests: Bool
    private let state: Mutex<State>

    public var baseURL: String { server.baseURL }
    public var jwksURL: String { "\(server.baseURL)/.well-known/jwks.json" }

    private struct Job {
        var model: String
        var submitted: ContinuousClock.Instant
        var latency: Duration
        var neverFinish: Bool
        var failure: JobFailure?
        var image: Data
        /// A chosen behaviour's garbage (`chooseBehavior`); nil: the behaviour's when asked.
        var malformed: [Endpoint: Garbage]?
        var cancelled = false
    }

    private struct State {
        var behavior = Behavior()
        var chooser: (@Sendable (Data) -> Behavior?)?
        var signingKey = FalSigningKey()
        var jobs: [String: Job] = [:]
        var requests: [RecordedRequest] = []
        var cancels: [String] = []
        var deliveries: [Delivery] = []
        var jwksFetches = 0
        /// Per request id: from the submit's arrival to the moment the webhook is sent.
        var providerTimes: [String: Duration] = [:]
        /// The most jobs unfinished at once (submitted, neither completed nor cancelled).
        var maxConcurrency = 0
        /// The jobs unfinished at the last submit, by when each completes (never: a century on),
        /// soonest first: a submit drops the completed ones from the front instead of a pass over
        /// every job ever submitted, which at 100 submits a second cost the benchmark's process
        /// more CPU than the dispatcher's work beside it.
        var unfinished: [(completes: ContinuousClock.Instant, id: String)] = []
    }

    /// - Parameter webhookClient: posts webhooks for submits that carry `fal_webhook`; without it none are sent.
    public static func start(key: String = "fake-fal-key", webhookClient: (any HTTPClient)? = nil, recordRequests: Bool = true) async throws -> FakeFal {
        let router = Router()
        let fake = Late<FakeFal>()
        router.get("**") { request, _ in try await fake.value.get(request) }
        router.post("**") { request, _ in try await fake.value.submit(request) }
        router.put("**") { request, _ in try await fake.value.cancel(request) }
        let server = try await FakeServer.start(router: router)
        return fake.set(FakeFal(key: key, server: server, webhookClient: webhookClient, recordRequests: recordRequests))
    }

    private init(key: String, server: FakeServer, webhookClient: (any HTTPClient)?, recordRequests: Bool) {
        self.key = key
        self.server = server
        self.webhookClient = webhookClient
        self.recordRequests = recordRequests
        self.state = Mutex(State())
    }

    public func stop() async { await server.stop() }

    // MARK: Test controls and observations

    public func update(_ change: (inout Behavior) -> Void) { state.withLock { change(&$0.behavior) } }
    /// Chooses each submit's behaviour from its body (nil: `behavior`), so that concurrent renders
    /// each meet their own fault, say by the photo they send. A chosen behaviour's counts of 429 and
    /// 503 answers say only whether that submit gets one.
    public func chooseBehavior(_ choose: @escaping @Sendable (_ submitBody: Data) -> Behavior?) { state.withLock { $0.chooser = choose } }
    public var requests: [RecordedRequest] { state.withLock { $0.requests } }
    /// Request ids whose cancel URL was called.
    public var cancelledRequestIDs: [String] { state.withLock { $0.cancels } }
    /// The most jobs it had unfinished at once: what a provider's concurrency limit counts.
    public var maxConcurrency: Int { state.withLock { $0.maxConcurrency } }
    public var deliveries: [Delivery] { state.withLock { $0.deliveries } }
    public var jwksFetches: Int { state.withLock { $0.jwksFetches } }
    /// The provider's own time for a request: from its submit's arrival to the start of its
    /// webhook (the fake's timer, however late it fired, counts as the provider's).
    public func providerTime(of requestID: String) -> Duration? { state.withLock { $0.providerTimes[requestID] } }
    /// The public key the JWKS serves now.
    public var publicKey: [UInt8] { state.withLock { $0.signingKey.publicKey } }

    /// A new signing key replaces the old one in the JWKS (fal's key rotation).
    public func rotateSigningKey() { state.withLock { $0.signingKey = FalSigningKey() } }

    /// The four `X-Fal-Webhook-*` headers fal would send with `body`, signed with the current key
    /// (or `key`).
    public func webhookHeaders(body: Data, requestID: String, timestamp: Date = Date(), key: FalSigningKey? = nil) -> [String: String] {
        let signingKey = key ?? state.withLock { $0.signingKey }
        let seconds = String(Int(timestamp.timeIntervalSince1970))
        let digest = SHA256.hash(data: body).hexString
        let signature = signingKey.sign(Array("\(requestID)\n\(userID)\n\(seconds)\n\(digest)".utf8))
        return [
            "X-Fal-Webhook-Request-Id": requestID, "X-Fal-Webhook-User-Id": userID,
            "X-Fal-Webhook-Timestamp": seconds, "X-Fal-Webhook-Signature": signature.hexString,
        ]
    }

    /// The webhook body fal sends when `requestID` finishes as it did here.
    public func webhookBody(requestID: String) -> Data {
        let (job, base) = (state.withLock { $0.jobs[requestID] }, baseURL)
        var object: [String: Any] = ["request_id": requestID, "gateway_request_id": requestID]
        if let failure = job?.failure {
            object["status"] = "ERROR"
            object["error"] = "Invalid status code: \(failure.status)"
            object["payload"] = ["detail": failure.detail, "error_type": failure.errorType]
        } else {
            object["status"] = "OK"
            object["error"] = NSNull()
            object["payload"] = Self.output(requestID: requestID, image: job?.image ?? Data(), base: base)
        }
        return (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data()
    }

    // MARK: Queue API

    private func submit(_ request: Request) async throws -> Response {
        let body = try await FakeHTTP.body(request)
        let recorded = FakeHTTP.record(request, body: body)
        remember(recorded)
        if let refusal = unauthorized(recorded) { return refusal }
        let endpoint = String(recorded.path.drop { $0 == "/" })
        guard let schema = FalModelSchema.known[endpoint] else {
            return FakeHTTP.json(404, ["detail": "Application '\(endpoint)' not found"])
        }
        let chosen = state.withLock { $0.chooser }?(body)
        let refusal: Response? = state.withLock { state in
            guard chosen == nil else { return chosen.flatMap(Self.refusal(by:)) }
            // The behaviour's counts are of submits: each refusal spends one.
            defer {
                if state.behavior.rateLimitedSubmits > 0 {
                    state.behavior.rateLimitedSubmits -= 1
                } else if state.behavior.transientSubmitFailures > 0 {
                    state.behavior.transientSubmitFailures -= 1
                }
            }
            return Self.refusal(by: state.behavior)
        }
        if let refusal { return refusal }
        if let invalid = schema.validate(body) { return invalid }
        let id = UUID().uuidString.lowercased()
        let (job, garbage) = state.withLock { state in
            let behavior = chosen ?? state.behavior
            let job = Job(
                model: schema.model, submitted: .now, latency: behavior.latency,
                neverFinish: behavior.neverFinish, failure: behavior.jobFailure, image: behavior.resultImage, malformed: chosen?.malformed)
            state.jobs[id] = job
            let now = ContinuousClock.now
            let completed = state.unfinished.prefix { $0.completes <= now }.count
            state.unfinished.removeFirst(completed)
            let completes = job.submitted + (job.neverFinish ? .seconds(100 * 365 * 86_400) : job.latency)
            var (low, high) = (0, state.unfinished.count)
            while low < high {
                let middle = (low + high) / 2
                if state.unfinished[middle].completes <= completes { low = middle + 1 } else { high = middle }
            }
            state.unfinished.insert((completes, id), at: low)
            state.maxConcurrency = max(state.maxConcurrency, state.unfinished.count)
            return (job, behavior.malformed[.submit])
        }
        if let webhook = recorded.query["fal_webhook"], webhookClient != nil, !job.neverFinish {
            Task { await self.deliverWebhook(requestID: id, to: webhook, after: job.latency) }
        }
        var reply = urls(id: id, model: job.model)
        reply["status"] = "IN_QUEUE"
        reply["queue_position"] = 0
        if let garbage { return garbage.response(reply) }
        return FakeHTTP.json(200, reply, headers: ["x-fal-request-id": id])
    }

    private func get(_ request: Request) async throws -> Response {
        let recorded = FakeHTTP.record(request, body: Data())
        let path = recorded.path
        if path == "/.well-known/jwks.json" {
            let key = state.withLock { state in
                state.jwksFetches += 1
                return state.signingKey
            }
            return FakeHTTP.json(200, ["keys": [["kty": "OKP", "crv": "Ed25519", "kid": key.id, "x": key.x]]])
        }
        if path.hasPrefix("/files/") {
            let id = path.dropFirst("/files/".count).replacingOccurrences(of: ".jpg", with: "")
            guard let image = state.withLock({ $0.jobs[id]?.image }) else { return FakeHTTP.json(404, ["detail": "Not found"]) }
            return FakeHTTP.bytes(200, image, contentType: "image/jpeg")
        }
        remember(recorded)
        if let refusal = unauthorized(recorded) { return refusal }
        let parts = path.split(separator: "/").map(String.init)
        guard parts.count >= 4, let marker = parts.lastIndex(of: "requests") else { return FakeHTTP.json(404, ["detail": "Not found"]) }
        let id = parts[marker + 1]
        guard let job = state.withLock({ $0.jobs[id] }) else { return FakeHTTP.json(404, ["detail": "Request not found"]) }
        let malformed = job.malformed ?? state.withLock { $0.behavior.malformed }
        if parts.last == "status", marker + 2 == parts.count - 1 {
            let reply = status(id: id, job: job)
            return malformed[.status].map { $0.response(reply) } ?? FakeHTTP.json(200, reply)
        }
        guard marker + 1 == parts.count - 1 else { return FakeHTTP.json(404, ["detail": "Not found"]) }
        if let garbage = malformed[.result], Self.isCompleted(job, at: .now) {
            return garbage.response(Self.output(requestID: id, image: job.image, base: baseURL))
        }
        return result(id: id, job: job)
    }

    private func cancel(_ request: Request) async throws -> Response {
        let recorded = FakeHTTP.record(request, body: Data())
        remember(recorded)
        if let refusal = unauthorized(recorded) { return refusal }
        let parts = recorded.path.split(separator: "/").map(String.init)
        guard parts.count >= 5, parts.last == "cancel", parts[parts.count - 3] == "requests" else {
            return FakeHTTP.json(404, ["detail": "Not found"])
        }
        let id = parts[parts.count - 2]
        let now = ContinuousClock.now
        return state.withLock { state in
            guard let job = state.jobs[id] else { return FakeHTTP.json(404, ["detail": "Request not found"]) }
            state.cancels.append(id)
            if Self.isCompleted(job, at: now) { return FakeHTTP.json(400, ["status": "ALREADY_COMPLETED"]) }
            state.jobs[id]?.cancelled = true
            state.unfinished.removeAll { $0.id == id }
            return FakeHTTP.json(202, ["status": "CANCELLATION_REQUESTED"])
        }
    }

    /// How `behavior` refuses a submit: 429, else 503, else 422; nil: it does not.
    private static func refusal(by behavior: Behavior) -> Response? {
        if behavior.rateLimitedSubmits > 0 {
            return FakeHTTP.json(429, ["detail": "Rate limit exceeded"], headers: ["Retry-After": "\(behavior.retryAfterSeconds)"])
        }
        if behavior.transientSubmitFailures > 0 {
            return FakeHTTP.json(503, ["detail": "Runner disconnected", "error_type": "runner_disconnected"], headers: ["X-Fal-Error-Type": "runner_disconnected"])
        }
        return behavior.rejection.map { validationError(field: $0.field, message: $0.message, type: "value_error") }
    }

    private func status(id: String, job: Job) -> [String: Any] {
        var reply = urls(id: id, model: job.model)
        let elapsed = ContinuousClock.now - job.submitted
        if Self.isCompleted(job, at: .now) {
            reply["status"] = "COMPLETED"
            reply["metrics"] = ["inference_time": job.latency.seconds]
        } else if elapsed < job.latency / 5 {
            reply["status"] = "IN_QUEUE"
            reply["queue_position"] = 0
        } else {
            reply["status"] = "IN_PROGRESS"
        }
        reply["logs"] = NSNull()
        return reply
    }

    private func result(id: String, job: Job) -> Response {
        if job.cancelled {
            return FakeHTTP.json(499, ["detail": "Request was cancelled", "error_type": "client_cancelled"])
        }
        guard Self.isCompleted(job, at: .now) else { return FakeHTTP.json(400, ["detail": "Request is still in progress"]) }
        if let failure = job.failure {
            var headers = ["X-Fal-Error-Type": failure.errorType]
            headers["X-Fal-Retryable"] = failure.retryable.map { $0 ? "true" : "false" }
            return FakeHTTP.json(failure.status, ["detail": failure.detail, "error_type": failure.errorType], headers: headers)
        }
        return FakeHTTP.json(200, Self.output(requestID: id, image: job.image, base: baseURL), headers: ["x-fal-request-id": id])
    }

    // MARK: Webhooks

    /// Posts the signed webhook for `requestID` to `url` now, as fal (re)delivers it; returns the
    /// receiver's status, nil when it could not be reached.
    @discardableResult
    public func postWebhook(requestID: String, to url: String) async -> Int? {
        guard let webhookClient else { return nil }
        let body = webhookBody(requestID: requestID)
        let headers = webhookHeaders(body: body, requestID: requestID).map { (name: $0.key, value: $0.value) }
        let status = try? await webhookClient.execute(.json(.post, url: url, body: body, headers: headers, timeout: .seconds(15))).status
        state.withLock { $0.deliveries.append(Delivery(url: url, body: body, status: status)) }
        return status
    }

    private func deliverWebhook(requestID: String, to url: String, after latency: Duration) async {
        try? await Task.sleep(for: latency)
        let sending = state.withLock { state -> Bool in
            guard let job = state.jobs[requestID], !job.cancelled else { return false }
            state.providerTimes[requestID] = .now - job.submitted
            return true
        }
        guard sending else { return }
        await postWebhook(requestID: requestID, to: url)
    }

    // MARK: Helpers

    private func remember(_ request: RecordedRequest) {
        guard recordRequests else { return }
        state.withLock { $0.requests.append(request) }
    }

    private func unauthorized(_ request: RecordedRequest) -> Response? {
        request.headers["authorization"] == "Key \(key)" ? nil : FakeHTTP.json(401, ["detail": "Invalid or missing credentials"])
    }

    /// Status, result and cancel URLs: `owner/alias` only, never the submit subpath.
    private func urls(id: String, model: String) -> [String: Any] {
        let base = "\(baseURL)/\(model)/requests/\(id)"
        return ["request_id": id, "response_url": base, "status_url": "\(base)/status", "cancel_url": "\(base)/cancel"]
    }

    private static func isCompleted(_ job: Job, at now: ContinuousClock.Instant) -> Bool {
        job.cancelled || (!job.neverFinish && now - job.submitted >= job.latency)
    }

    private static func output(requestID: String, image: Data, base: String) -> [String: Any] {
        ["images": [[
            "url": "\(base)/files/\(requestID).jpg", "content_type": "image/jpeg",
            "file_name": "\(requestID).jpg", "file_size": image.count,
        ]]]
    }

    static func validationError(field: String, message: String, type: String) -> Response {
        FakeHTTP.json(422, ["detail": [["loc": ["body", field], "msg": message, "type": type, "url": "https://docs.fal.ai/errors/#\(type)"]]],
                      headers: ["X-Fal-Retryable": "false"])
    }
}

/// An Ed25519 key pair as fal signs webhooks with (libsodium).
public struct FalSigningKey: Sendable {
    public let publicKey: [UInt8]
    private let secretKey: [UInt8]
    public let id: String

    public init() {
        _ = sodium_init()
        var publicKey = [UInt8](repeating: 0, count: Int(crypto_sign_PUBLICKEYBYTES))
        var secretKey = [UInt8](repeating: 0, count: Int(crypto_sign_SECRETKEYBYTES))
        crypto_sign_keypair(&publicKey, &secretKey)
        self.publicKey = publicKey
        self.secretKey = secretKey
        self.id = publicKey.prefix(4).hexString
    }

    /// The JWKS `x`: base64url, unpadded.
    public var x: String {
        Data(publicKey).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    public func sign(_ message: [UInt8]) -> [UInt8] {
        var signature = [UInt8](repeating: 0, count: Int(crypto_sign_BYTES))
        crypto_sign_detached(&signature, nil, message, UInt64(message.count), secretKey)
        return signature
    }
}

/// What the fake checks of each model's input, so a provider sending the wrong shape gets the
/// 422 fal would send.
struct FalModelSchema {
    /// `owner/alias`: status and result URLs use it.
    var model: String
    var required: [String]
    var images: [String]
    var choices: [String: Set<String>]

    static let known: [String: FalModelSchema] = [
        "fal-ai/fashn/tryon/v1.6": FalModelSchema(
            model: "fal-ai/fashn/tryon", required: ["model_image", "garment_image"], images: ["model_image", "garment_image"],
            choices: ["category": ["tops", "bottoms", "one-pieces", "auto"], "mode": ["performance", "balanced", "quality"],
                      "output_format": ["png", "jpeg"], "garment_photo_type": ["auto", "model", "flat-lay"]]),
        "fal-ai/nano-banana-pro/edit": FalModelSchema(
            model: "fal-ai/nano-banana-pro", required: ["prompt", "image_urls"], images: ["image_urls"],
            choices: ["output_format": ["jpeg", "png", "webp"], "resolution": ["1K", "2K", "4K"]]),
    ]

    /// A 422 response when the input is not what the model takes.
    func validate(_ body: Data) -> Response? {
        guard let input = (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] else {
            return FakeFal.validationError(field: "body", message: "Input should be a valid JSON object", type: "json_invalid")
        }
        for field in required where input[field] == nil {
            return FakeFal.validationError(field: field, message: "field required", type: "value_error.missing")
        }
        for field in images {
            let values = input[field] as? [String] ?? [input[field] as? String].compactMap { $0 }
            if values.isEmpty || !values.allSatisfy(Self.isImageReference) {
                return FakeFal.validationError(field: field, message: "Input should be a valid URL or data URI", type: "url_parsing")
            }
        }
        for (field, allowed) in choices {
            if let value = input[field], !allowed.contains("\(value)") {
                return FakeFal.validationError(field: field, message: "Input should be one of \(allowed.sorted())", type: "literal_error")
            }
        }
        return nil
    }

    private static func isImageReference(_ value: String) -> Bool {
        if value.hasPrefix("https://") { return true }
        guard value.hasPrefix("data:image/"), let comma = value.firstIndex(of: ","), value[..<comma].hasSuffix(";base64") else { return false }
        return Data(base64Encoded: String(value[value.index(after: comma)...])) != nil
    }
}
