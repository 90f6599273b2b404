import Crypto
import FleetHTTPClient
import FleetStorage
import Foundation

/// How long an S3 request may keep failing before its caller hears of it: 500, 502, 503
/// (`SlowDown`), 504, 429, resets and timeouts are tried again after a backoff that doubles from
/// `base` up to `cap` (±25 %), as long as the whole call stays within `budget`.
public struct S3RetryPolicy: Sendable, Equatable {
    public var base: Duration
    public var cap: Duration
    /// The whole call's bound, its tries and waits together: the caller's time (a job's lease).
    public var budget: Duration
    /// Each request's own limit.
    public var requestTimeout: Duration

    public init(base: Duration = .milliseconds(200), cap: Duration = .seconds(5), budget: Duration = .seconds(20), requestTimeout: Duration = .seconds(15)) {
        self.base = base
        self.cap = cap
        self.budget = budget
        self.requestTimeout = requestTimeout
    }

    /// The wait before try `attempt + 1` (`attempt` counts from 1).
    func backoff(after attempt: Int, jitter: Double = Double.random(in: -0.25...0.25)) -> Duration {
        min(base * (1 << min(attempt - 1, 20)), cap) * (1 + jitter)
    }
}

/// What a HEAD says of an object: its size before any byte of it is read, and its ETag.
public struct S3ObjectInfo: Sendable, Equatable {
    public let size: Int
    /// Without its quotes: the MD5 of the bytes (lower-case hex) for an object stored by one PUT,
    /// `<hex>-<parts>` for a multipart upload's.
    public let etag: String?

    /// The MD5 of the object's bytes when its ETag is one (a single PUT's); nil for a multipart
    /// upload's or an encrypted object's, whose ETag is something else.
    public var md5: String? { Self.md5(ofETag: etag) }

    /// The MD5 an ETag (without quotes) is, when it is one.
    static func md5(ofETag etag: String?) -> String? {
        guard let etag, etag.utf8.count == 32, etag.allSatisfy(\.isHexDigit) else { return nil }
        return etag.lowercased()
    }

    static func unquoted(_ etag: String) -> String {
        etag.hasPrefix("\"") && etag.hasSuffix("\"") && etag.count >= 2 ? String(etag.dropFirst().dropLast()) : etag
    }
}

/// One object of a ListObjectsV2 page: its key, size and ETag (quotes removed).
public struct S3ListedObject: Sendable, Equatable {
    public let key: String
    public let size: Int
    public let etag: String?
}

/// One page of a ListObjectsV2.
public struct S3ListPage: Sendable {
    public let objects: [S3ListedObject]
    /// The token of the next page; nil on the last.
    public let continuationToken: String?

    public var keys: [String] { objects.map(\.key) }
}

/// The S3 REST calls the fleet makes, over the `HTTPClient` seam, each signed with AWS Signature
/// V4 and tried again within the `S3RetryPolicy`. Bodies are sent whole, with their SHA-256
/// signed (`x-amz-content-sha256`), so a body changed on the way is refused by the store.
public struct S3Client: Sendable {
    /// The most keys DeleteObjects takes in one request.
    public static let deleteBatchLimit = 1000

    public let endpoint: S3Endpoint
    public let retry: S3RetryPolicy
    private let http: any HTTPClient
    private let signer: SigV4Signer

    public init(endpoint: S3Endpoint, credentials: S3Credentials, http: any HTTPClient, retry: S3RetryPolicy = S3RetryPolicy()) {
        self.endpoint = endpoint
        self.retry = retry
        self.http = http
        self.signer = SigV4Signer(credentials: credentials, region: endpoint.region)
    }

    /// Stores `body` at `key` in one PUT: the object is whole or absent. With `ifAbsent`, a key that
    /// holds an object already is left as it is and the call throws `.alreadyExists`
    /// (`If-None-Match: *`). Answers the new object's ETag.
    @discardableResult
    public func put(key: String, body: Data, contentType: String? = nil, ifAbsent: Bool = false) async throws(S3Error) -> String? {
        var headers: [(name: String, value: String)] = []
        if let contentType { headers.append(("content-type", contentType)) }
        if ifAbsent { headers.append(("if-none-match", "*")) }
        let response = try await send("PUT object", .put, key: key, headers: headers, body: body)
        return response.headers["etag"]
    }

    /// The object's bytes; `.tooLarge` when it has more than `maxBytes`, without reading them all.
    public func get(key: String, maxBytes: Int) async throws(S3Error) -> Data {
        try await send("GET object", .get, key: key, maxResponseBytes: maxBytes).body
    }

    /// The object's size and ETag, without its bytes.
    public func head(key: String) async throws(S3Error) -> S3ObjectInfo {
        let response = try await send("HEAD object", .head, key: key)
        guard let size = response.headers["content-length"].flatMap(Int.init) else {
            throw S3Error(kind: .refused, operation: "HEAD object", status: response.status, code: "NoContentLength", message: "the answer has no Content-Length")
        }
        return S3ObjectInfo(size: size, etag: response.headers["etag"].map(S3ObjectInfo.unquoted))
    }

    /// Deletes the object at `key`; a missing key is no error (S3 answers 204 either way).
    public func delete(key: String) async throws(S3Error) {
        do {
            _ = try await send("DELETE object", .delete, key: key)
        } catch where error.kind == .notFound {
            return
        }
    }

    /// One page of the objects under `prefix` (at most 1,000) in key order, from `continuationToken`
    /// on, or those whose key sorts after `startAfter` (a key of a page before: a cursor that needs
    /// no state kept between calls, so a copy stopped half way resumes from its last key).
    public func list(prefix: String, continuationToken: String? = nil, startAfter: String? = nil, maxKeys: Int = 1000) async throws(S3Error) -> S3ListPage {
        var query: [(name: String, value: String)] = [("list-type", "2"), ("prefix", prefix), ("max-keys", String(maxKeys))]
        if let continuationToken { query.append(("continuation-token", continuationToken)) }
        if let startAfter { query.append(("start-after", startAfter)) }
        let response = try await send("ListObjectsV2", .get, key: "", query: query)
        let xml = String(decoding: response.body, as: UTF8.self)
        let objects = S3XML.elements("Contents", in: xml).compactMap { entry -> S3ListedObject? in
            guard let key = S3XML.value(of: "Key", in: entry) else { return nil }
            return S3ListedObject(
                key: key, size: S3XML.value(of: "Size", in: entry).flatMap(Int.init) ?? 0,
                etag: S3XML.value(of: "ETag", in: entry).map(S3ObjectInfo.unquoted))
        }
        let truncated = S3XML.value(of: "IsTruncated", in: xml) == "true"
        return S3ListPage(objects: objects, continuationToken: truncated ? S3XML.value(of: "NextContinuationToken", in: xml) : nil)
    }

    /// Deletes up to 1,000 keys in one DeleteObjects request; missing keys count as deleted.
    /// Throws the first key's error the store reports (its code and message, not the key).
    public func delete(keys: [String]) async throws(S3Error) {
        precondition(keys.count <= Self.deleteBatchLimit, "DeleteObjects takes at most \(Self.deleteBatchLimit) keys")
        guard !keys.isEmpty else { return }
        let objects = keys.map { "<Object><Key>\(S3XML.escaped($0))</Key></Object>" }.joined()
        let body = Data("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Delete><Quiet>true</Quiet>\(objects)</Delete>".utf8)
        // S3 requires Content-MD5 (or a checksum header) on DeleteObjects.
        let md5 = Data(Insecure.MD5.hash(data: body)).base64EncodedString()
        let response = try await send(
            "DeleteObjects", .post, key: "", query: [("delete", "")],
            headers: [("content-md5", md5), ("content-type", "application/xml")], body: body)
        let xml = String(decoding: response.body, as: UTF8.self)
        for failure in S3XML.elements("Error", in: xml) {
            let code = S3XML.value(of: "Code", in: failure) ?? "Unknown"
            if code == "NoSuchKey" { continue }
            let kind: S3Error.Kind = code == "AccessDenied" ? .denied : code == "InternalError" || code == "SlowDown" ? .unavailable : .refused
            throw S3Error(kind: kind, operation: "DeleteObjects", status: response.status, code: code, message: S3XML.value(of: "Message", in: failure) ?? "")
        }
    }

    /// Signs and sends one request, again while it fails for a reason another try may fix and the
    /// budget allows; the last failure is thrown.
    private func send(
        _ operation: String, _ method: HTTPClientRequest.Method, key: String, query: [(name: String, value: String)] = [],
        headers: [(name: String, value: String)] = [], body: Data? = nil, maxResponseBytes: Int = 1 << 20
    ) async throws(S3Error) -> HTTPClientResponse {
        let started = ContinuousClock.now
        var attempt = 1
        while true {
            let failure: S3Error
            do {
                let response = try await http.execute(request(
                    method, key: key, query: query, headers: headers, body: body, maxResponseBytes: maxResponseBytes))
                if response.isSuccess { return response }
                failure = S3Error(operation: operation, response: response)
            } catch let error as HTTPClientError {
                failure = S3Error(operation: operation, transport: error)
            } catch {
                failure = S3Error(kind: .unavailable, operation: operation, status: nil, code: "ClientError", message: "\(error)")
            }
            let wait = retry.backoff(after: attempt)
            guard failure.isRetryable, ContinuousClock.now - started + wait < retry.budget, !Task.isCancelled else { throw failure }
            try? await Task.sleep(for: wait)
            attempt += 1
        }
    }

    private func request(
        _ method: HTTPClientRequest.Method, key: String, query: [(name: String, value: String)],
        headers: [(name: String, value: String)], body: Data?, maxResponseBytes: Int
    ) -> HTTPClientRequest {
        let path = endpoint.path(ofKey: key)
        let signing = SigV4Request(method: method.rawValue, path: path, query: query, headers: [("host", endpoint.hostHeader)] + headers)
        // Signed anew for each try: the signature dates the request.
        let signed = signer.authorizationHeaders(for: signing, payloadHash: SigV4Signer.payloadHash(body ?? Data()), at: Date())
        var request = HTTPClientRequest(
            method: method, url: endpoint.url(path: path, canonicalQuery: SigV4Encoding.canonicalQuery(query)),
            headers: headers + signed, body: body, timeout: retry.requestTimeout, maxResponseBytes: maxResponseBytes)
        // Every call here does no more when sent twice (DeleteObjects' POST included); a PUT
        // with If-None-Match sent twice answers 412 the second time, which the caller reads.
        request.isIdempotent = true
        request.followsRedirects = false
        return request
    }
}
