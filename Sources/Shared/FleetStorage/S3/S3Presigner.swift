import Foundation

/// The fleet's presigned URLs for objects in one bucket: who holds one may GET (or PUT) that
/// object without keys, so they live at most 15 minutes. A PUT URL signs the body's length
/// and type: the holder can store exactly that many bytes of that type, nothing bigger.
public struct S3Presigner: Sendable {
    /// The lifetimes this presigner grants, in seconds.
    public static let lifetimes = 1...900

    public let endpoint: S3Endpoint
    public let signer: SigV4Signer

    public init(endpoint: S3Endpoint, credentials: S3Credentials) {
        self.endpoint = endpoint
        self.signer = SigV4Signer(credentials: credentials, region: endpoint.region)
    }

    /// A URL that GETs the object `key` until `lifetime` after `date`.
    public func get(key: String, lifetime: Duration, at date: Date = Date()) throws(S3SigningError) -> String {
        try url(method: "GET", key: key, extraHeaders: [], lifetime: lifetime, at: date)
    }

    /// A URL that PUTs the object `key` with a body of exactly `contentLength` bytes of
    /// `contentType`: the store refuses the request when either header differs from what was signed.
    /// `onlyIfAbsent` also signs `If-None-Match: *`: the store refuses (412) to replace an object
    /// already there, so the URL creates the object once and can never overwrite it.
    public func put(
        key: String, contentLength: Int, contentType: String, onlyIfAbsent: Bool = false, lifetime: Duration, at date: Date = Date()
    ) throws(S3SigningError) -> String {
        try url(
            method: "PUT", key: key,
            extraHeaders: [("content-length", String(contentLength)), ("content-type", contentType)]
                + (onlyIfAbsent ? [("if-none-match", "*")] : []),
            lifetime: lifetime, at: date
        )
    }

    private func url(
        method: String, key: String, extraHeaders: [(name: String, value: String)], lifetime: Duration, at date: Date
    ) throws(S3SigningError) -> String {
        let seconds = Int(lifetime.components.seconds)
        guard Self.lifetimes.contains(seconds) else { throw .lifetimeOutOfRange(seconds: seconds, allowed: Self.lifetimes) }
        let path = endpoint.path(ofKey: key)
        let request = SigV4Request(method: method, path: path, headers: [("host", endpoint.hostHeader)] + extraHeaders)
        return endpoint.url(path: path, canonicalQuery: try signer.presignedQuery(for: request, lifetimeSeconds: seconds, at: date))
    }
}
