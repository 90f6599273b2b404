import FleetSupport

/// Where the fleet keeps its images, from the environment: a local folder (the default) or a
/// bucket of an S3-compatible store. Every process that reads or writes images (image worker,
/// render worker, dispatcher for presigned URLs) reads the same variables.
///
/// - `FLEET_STORAGE`: `s3://bucket/optional/prefix`, `file:///absolute/folder` (or the folder's
///   path), or unset.
///   Unset keeps `FLEET_STORAGE_ROOT` (default `.data/images`).
/// - For `s3://`, the AWS CLI's own variables: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
///   `AWS_SESSION_TOKEN` (temporary credentials), `AWS_REGION` (or `AWS_DEFAULT_REGION`,
///   default `us-east-1`), `AWS_ENDPOINT_URL_S3` (or `AWS_ENDPOINT_URL`; default AWS's
///   regional endpoint), and `FLEET_S3_ADDRESSING` (`path` or `virtual`; default `virtual` on
///   AWS's endpoint, `path` on any other, as gateways on an address need).
public enum StorageLocation: Sendable, Equatable {
    case files(root: String)
    case s3(S3StoreSettings)

    public static func load(from environment: [String: String]) throws -> StorageLocation {
        let value = environment["FLEET_STORAGE"] ?? ""
        if value.isEmpty { return .files(root: environment["FLEET_STORAGE_ROOT"] ?? ".data/images") }
        return try parse(value, variable: "FLEET_STORAGE", environment: environment)
    }

    /// `FLEET_STORAGE_FALLBACK`: the store the images are moving from, which reads that miss in
    /// `FLEET_STORAGE` look in (`FallbackImageStorage`); nil when unset.
    public static func loadFallback(from environment: [String: String]) throws -> StorageLocation? {
        let value = environment["FLEET_STORAGE_FALLBACK"] ?? ""
        if value.isEmpty { return nil }
        return try parse(value, variable: "FLEET_STORAGE_FALLBACK", environment: environment)
    }

    /// A location written as `FLEET_STORAGE` takes it (`s3://bucket/prefix`, `file:///folder`), or
    /// a folder's path (`/data/images`): the copy command's `--from` and `--to`, the fallback.
    /// `variable` is what a refusal names.
    public static func parse(_ value: String, variable: String, environment: [String: String]) throws -> StorageLocation {
        if value.hasPrefix("file://") {
            let root = String(value.dropFirst("file://".count))
            guard root.hasPrefix("/") else {
                throw ConfigurationError(variable: variable, reason: "'\(value)' is not file:///absolute/folder")
            }
            return .files(root: root)
        }
        if value.hasPrefix("s3://") {
            return .s3(try S3StoreSettings.load(location: String(value.dropFirst("s3://".count)), variable: variable, environment: environment))
        }
        guard !value.contains("://") else {
            throw ConfigurationError(variable: variable, reason: "'\(value)' is neither s3://bucket/prefix nor file:///folder")
        }
        return .files(root: value.count > 1 && value.hasSuffix("/") ? String(value.dropLast()) : value)
    }

    /// Whether the location is a bucket, whose reachability the workers check before they claim.
    public var isBucket: Bool {
        if case .s3 = self { true } else { false }
    }

    /// What a log line may say about the location: never a key.
    public var summary: String {
        switch self {
        case .files(let root): "files at \(root)"
        case .s3(let settings): "s3 bucket \(settings.endpoint.bucket)\(settings.prefix.isEmpty ? "" : " prefix \(settings.prefix)") at \(settings.endpoint.hostHeader) (\(settings.endpoint.region))"
        }
    }
}

/// A bucket, the prefix under it that holds the fleet's tree, and the keys that sign requests.
public struct S3StoreSettings: Sendable, Equatable {
    public let endpoint: S3Endpoint
    /// Prepended to every storage key (`prefix/userId/...`); empty or ending in `/`.
    public let prefix: String
    public let credentials: S3Credentials

    public init(endpoint: S3Endpoint, prefix: String, credentials: S3Credentials) {
        self.endpoint = endpoint
        self.prefix = prefix.isEmpty || prefix.hasSuffix("/") ? prefix : prefix + "/"
        self.credentials = credentials
    }

    /// The object key of a storage key's relative path.
    public func objectKey(_ relativePath: String) -> String { prefix + relativePath }

    static func load(location: String, variable: String, environment: [String: String]) throws -> S3StoreSettings {
        let parts = location.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        let bucket = String(parts[0])
        // S3's bucket rules: 3-63 characters of lower-case letters, digits, dots and hyphens.
        guard (3...63).contains(bucket.count), bucket.allSatisfy({ $0.isLowercase || $0.isNumber || $0 == "-" || $0 == "." }) else {
            throw ConfigurationError(variable: variable, reason: "'\(bucket)' is not a bucket name (3-63 of a-z 0-9 . -)")
        }
        let prefix = parts.count > 1 ? String(parts[1]) : ""
        func value(_ names: String...) -> String? {
            names.lazy.compactMap { environment[$0] }.first { !$0.isEmpty }
        }
        guard let accessKey = value("AWS_ACCESS_KEY_ID") else {
            throw ConfigurationError(variable: "AWS_ACCESS_KEY_ID", reason: "must be set with \(variable)=s3://")
        }
        guard let secretKey = value("AWS_SECRET_ACCESS_KEY") else {
            throw ConfigurationError(variable: "AWS_SECRET_ACCESS_KEY", reason: "must be set with \(variable)=s3://")
        }
        let region = value("AWS_REGION", "AWS_DEFAULT_REGION") ?? "us-east-1"
        let endpointVariable = environment["AWS_ENDPOINT_URL_S3"].map { $0.isEmpty } == false ? "AWS_ENDPOINT_URL_S3" : "AWS_ENDPOINT_URL"
        let service: (scheme: S3Endpoint.Scheme, host: String, port: Int?, isAWS: Bool)
        if let url = value("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL") {
            service = try parseEndpoint(url, variable: endpointVariable)
        } else {
            service = (.https, "s3.\(region).amazonaws.com", nil, true)
        }
        let addressing: S3Endpoint.Addressing
        switch environment["FLEET_S3_ADDRESSING"] ?? "" {
        case "": addressing = service.isAWS ? .virtualHosted : .pathStyle
        case "path": addressing = .pathStyle
        case "virtual": addressing = .virtualHosted
        case let other: throw ConfigurationError(variable: "FLEET_S3_ADDRESSING", reason: "'\(other)' is neither path nor virtual")
        }
        return S3StoreSettings(
            endpoint: S3Endpoint(scheme: service.scheme, host: service.host, port: service.port, region: region, bucket: bucket, addressing: addressing),
            prefix: prefix,
            credentials: S3Credentials(accessKeyID: accessKey, secretAccessKey: secretKey, sessionToken: value("AWS_SESSION_TOKEN")))
    }

    private static func parseEndpoint(_ url: String, variable: String) throws -> (scheme: S3Endpoint.Scheme, host: String, port: Int?, isAWS: Bool) {
        let invalid = ConfigurationError(variable: variable, reason: "'\(url)' is not http(s)://host[:port]")
        guard let schemeEnd = url.range(of: "://"), let scheme = S3Endpoint.Scheme(rawValue: String(url[..<schemeEnd.lowerBound]).lowercased()) else {
            throw invalid
        }
        var authority = String(url[schemeEnd.upperBound...])
        if authority.hasSuffix("/") { authority.removeLast() }
        guard !authority.isEmpty, !authority.contains("/"), !authority.contains("@") else { throw invalid }
        if let address = HostAndPort(authority) {
            return (scheme, address.host, address.port, address.host.hasSuffix(".amazonaws.com"))
        }
        guard !authority.contains(":") else { throw invalid }
        return (scheme, authority, nil, authority.hasSuffix(".amazonaws.com"))
    }
}
