/// Where a bucket is reached: the service's scheme, host and port, its region (part of every
/// signature), and how the bucket is named in a request.
public struct S3Endpoint: Sendable, Equatable {
    /// Path-style puts the bucket in the path (`host/bucket/key`): what a gateway on an address
    /// (a Ceph RADOS gateway on loopback) needs. Virtual-hosted puts it in the host name
    /// (`bucket.host/key`): what AWS prefers.
    public enum Addressing: Sendable, Equatable {
        case pathStyle
        case virtualHosted
    }

    public enum Scheme: String, Sendable, Equatable {
        case http, https
    }

    public let scheme: Scheme
    public let host: String
    /// nil is the scheme's default port, which the `Host` header leaves out.
    public let port: Int?
    public let region: String
    public let bucket: String
    public let addressing: Addressing

    public init(scheme: Scheme, host: String, port: Int? = nil, region: String, bucket: String, addressing: Addressing) {
        self.scheme = scheme
        self.host = host
        self.port = port
        self.region = region
        self.bucket = bucket
        self.addressing = addressing
    }

    /// The `Host` header of a request to the bucket, with the port when it is not the scheme's.
    public var hostHeader: String {
        let name = addressing == .virtualHosted ? "\(bucket).\(host)" : host
        guard let port, port != (scheme == .https ? 443 : 80) else { return name }
        return "\(name):\(port)"
    }

    /// The unencoded path of an object (`/key`, or `/bucket/key` path-style); an empty key names
    /// the bucket itself (`/`, or `/bucket/` path-style).
    public func path(ofKey key: String) -> String {
        switch addressing {
        case .virtualHosted: "/" + key
        case .pathStyle: "/\(bucket)/" + key
        }
    }

    /// The URL of a request: the path percent-encoded as it is signed, then the query as signed.
    public func url(path: String, canonicalQuery: String) -> String {
        let base = "\(scheme.rawValue)://\(hostHeader)\(SigV4Encoding.path(path))"
        return canonicalQuery.isEmpty ? base : "\(base)?\(canonicalQuery)"
    }
}
