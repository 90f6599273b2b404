import Crypto
import Foundation

/// An HTTP request as AWS Signature V4 sees it. The path is unencoded (`/bucket/a b.jpg`); the
/// signer encodes it and the query the way it signs them, and `S3Endpoint.url` builds the URL
/// from the same encoding. `headers` holds every header to sign, `Host` included.
public struct SigV4Request: Sendable {
    public var method: String
    public var path: String
    public var query: [(name: String, value: String)]
    public var headers: [(name: String, value: String)]

    public init(method: String, path: String, query: [(name: String, value: String)] = [], headers: [(name: String, value: String)]) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
    }
}

public enum S3SigningError: Error, Equatable, CustomStringConvertible {
    /// A presigned URL's lifetime outside what the signer (or its caller's policy) allows.
    case lifetimeOutOfRange(seconds: Int, allowed: ClosedRange<Int>)

    public var description: String {
        switch self {
        case .lifetimeOutOfRange(let seconds, let allowed):
            "a presigned URL lives \(allowed.lowerBound) to \(allowed.upperBound) seconds, not \(seconds)"
        }
    }
}

/// AWS Signature Version 4 (`AWS4-HMAC-SHA256`) for S3-compatible stores: the `Authorization`
/// header of a request, or the query of a presigned URL. Pure and deterministic for a given
/// instant, so AWS's published examples check it byte for byte.
public struct SigV4Signer: Sendable {
    public static let algorithm = "AWS4-HMAC-SHA256"
    /// The payload hash of a presigned URL, whose body the signer never sees.
    public static let unsignedPayload = "UNSIGNED-PAYLOAD"
    /// The longest lifetime S3 accepts for a presigned URL: seven days.
    public static let presignedLifetimes = 1...604_800

    public let credentials: S3Credentials
    public let region: String
    public let service: String

    public init(credentials: S3Credentials, region: String, service: String = "s3") {
        self.credentials = credentials
        self.region = region
        self.service = service
    }

    /// The lower-case hex SHA-256 of a body, for `x-amz-content-sha256`.
    public static func payloadHash(_ body: some DataProtocol) -> String {
        SHA256.hash(data: body).hexString
    }

    /// The headers to add to `request` so the store accepts it: `x-amz-date`,
    /// `x-amz-content-sha256`, `x-amz-security-token` for temporary credentials, and
    /// `Authorization`. All but `Authorization` are signed with the request's own headers.
    public func authorizationHeaders(
        for request: SigV4Request, payloadHash: String, at date: Date
    ) -> [(name: String, value: String)] {
        let time = SigV4Timestamp(date)
        var added: [(name: String, value: String)] = [("x-amz-date", time.full), ("x-amz-content-sha256", payloadHash)]
        if let token = credentials.sessionToken { added.append(("x-amz-security-token", token)) }
        let canonical = CanonicalRequest(
            method: request.method, path: request.path, query: request.query,
            headers: request.headers + added, payloadHash: payloadHash
        )
        let authorization = "\(Self.algorithm) Credential=\(credentials.accessKeyID)/\(scope(time)),"
            + "SignedHeaders=\(canonical.signedHeaders),Signature=\(signature(of: canonical, at: time))"
        return added + [("Authorization", authorization)]
    }

    /// The encoded query of a presigned URL for `request`, `X-Amz-Signature` last: the request's
    /// own query plus the signing parameters, the session token among them (S3 signs it). Only
    /// `request.headers` are signed, so a client using the URL must send exactly those.
    public func presignedQuery(
        for request: SigV4Request, lifetimeSeconds: Int, at date: Date
    ) throws(S3SigningError) -> String {
        guard Self.presignedLifetimes.contains(lifetimeSeconds) else {
            throw .lifetimeOutOfRange(seconds: lifetimeSeconds, allowed: Self.presignedLifetimes)
        }
        let time = SigV4Timestamp(date)
        var query = request.query + [
            ("X-Amz-Algorithm", Self.algorithm),
            ("X-Amz-Credential", "\(credentials.accessKeyID)/\(scope(time))"),
            ("X-Amz-Date", time.full),
            ("X-Amz-Expires", String(lifetimeSeconds)),
            ("X-Amz-SignedHeaders", CanonicalRequest.signedHeaderNames(request.headers)),
        ]
        if let token = credentials.sessionToken { query.append(("X-Amz-Security-Token", token)) }
        let canonical = CanonicalRequest(
            method: request.method, path: request.path, query: query,
            headers: request.headers, payloadHash: Self.unsignedPayload
        )
        return canonical.query + "&X-Amz-Signature=" + signature(of: canonical, at: time)
    }

    /// `<day>/<region>/<service>/aws4_request`: what the key is derived for.
    private func scope(_ time: SigV4Timestamp) -> String {
        "\(time.day)/\(region)/\(service)/aws4_request"
    }

    private func signature(of canonical: CanonicalRequest, at time: SigV4Timestamp) -> String {
        let stringToSign = [
            Self.algorithm, time.full, scope(time), SHA256.hash(data: Data(canonical.text.utf8)).hexString,
        ].joined(separator: "\n")
        var key = SymmetricKey(data: Data("AWS4\(credentials.secretAccessKey)".utf8))
        for part in [time.day, region, service, "aws4_request"] {
            key = SymmetricKey(data: Data(HMAC<SHA256>.authenticationCode(for: Data(part.utf8), using: key)))
        }
        return Data(HMAC<SHA256>.authenticationCode(for: Data(stringToSign.utf8), using: key)).hexString
    }
}

/// The canonical request of the signature docs: method, encoded path, sorted encoded query,
/// sorted lower-case headers with trimmed values, their names, and the payload hash.
struct CanonicalRequest {
    let text: String
    let query: String
    let signedHeaders: String

    init(method: String, path: String, query: [(name: String, value: String)], headers: [(name: String, value: String)], payloadHash: String) {
        self.query = SigV4Encoding.canonicalQuery(query)
        let fields = Self.canonicalHeaders(headers)
        signedHeaders = fields.map(\.name).joined(separator: ";")
        text = [
            method, SigV4Encoding.path(path), self.query,
            fields.map { "\($0.name):\($0.value)\n" }.joined(), signedHeaders, payloadHash,
        ].joined(separator: "\n")
    }

    static func signedHeaderNames(_ headers: [(name: String, value: String)]) -> String {
        canonicalHeaders(headers).map(\.name).joined(separator: ";")
    }

    /// Names lower-cased and sorted; values trimmed with inner runs of spaces made one; a
    /// repeated header's values joined by commas in the order given.
    private static func canonicalHeaders(_ headers: [(name: String, value: String)]) -> [(name: String, value: String)] {
        var values: [String: [String]] = [:]
        for (name, value) in headers {
            let collapsed = value.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
            values[name.lowercased(), default: []].append(collapsed.trimmingCharacters(in: .whitespaces))
        }
        return values.keys.sorted().map { ($0, values[$0]!.joined(separator: ",")) }
    }
}

/// An instant as SigV4 writes it, in UTC: `20130524T000000Z` and its day `20130524`.
struct SigV4Timestamp {
    let full: String
    let day: String

    init(_ date: Date) {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        day = String(format: "%04d%02d%02d", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1, Int(parts.tm_mday))
        full = day + String(format: "T%02d%02d%02dZ", Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec))
    }
}

extension Sequence<UInt8> {
    /// Lower-case hex, as SigV4 writes hashes and signatures.
    fileprivate var hexString: String {
        map { String(format: "%02x", $0) }.joined()
    }
}
