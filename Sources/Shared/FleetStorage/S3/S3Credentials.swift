/// The keys a request to an S3-compatible store is signed with. Temporary credentials (from STS
/// or an instance role) carry a session token, sent as `x-amz-security-token`.
public struct S3Credentials: Sendable, Equatable, CustomStringConvertible {
    public let accessKeyID: String
    public let secretAccessKey: String
    public let sessionToken: String?

    public init(accessKeyID: String, secretAccessKey: String, sessionToken: String? = nil) {
        self.accessKeyID = accessKeyID
        self.secretAccessKey = secretAccessKey
        self.sessionToken = sessionToken
    }

    /// Only the access key id, which is no secret: a logged value never shows the secret key or
    /// the session token.
    public var description: String {
        "S3Credentials(accessKeyID: \(accessKeyID), secretAccessKey: <redacted>\(sessionToken == nil ? "" : ", sessionToken: <redacted>"))"
    }
}
