import FleetStorage
import Foundation
import Testing

/// AWS Signature V4 checked against the examples AWS publishes in the S3 API reference:
/// "Signature Calculations for the Authorization Header: Transferring Payload in a Single Chunk"
/// (sig-v4-header-based-auth: GET object, PUT object, GET bucket lifecycle, list objects) and
/// "Authenticating Requests: Using Query Parameters" (sigv4-query-string-auth: the presigned
/// URL). Every example signs at 2013-05-24T00:00:00Z in us-east-1 for bucket `examplebucket`,
/// virtual-hosted, with AWS's example keys; the expected signatures are quoted from those pages.
@Suite struct SigV4SignerTests {
    static let exampleCredentials = S3Credentials(
        accessKeyID: "AKIAIOSFODNN7EXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    )
    static let signer = SigV4Signer(credentials: exampleCredentials, region: "us-east-1")
    /// Fri, 24 May 2013 00:00:00 GMT.
    static let exampleDate = Date(timeIntervalSince1970: 1_369_353_600)
    static let host = ("Host", "examplebucket.s3.amazonaws.com")
    /// The SHA-256 of an empty body, as the examples send it.
    static let emptyBodyHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    static func authorization(_ headers: [(name: String, value: String)]) -> String? {
        headers.first { $0.name == "Authorization" }?.value
    }

    @Test func getObjectWithARange() {
        let request = SigV4Request(method: "GET", path: "/test.txt", headers: [Self.host, ("Range", "bytes=0-9")])
        let headers = Self.signer.authorizationHeaders(for: request, payloadHash: Self.emptyBodyHash, at: Self.exampleDate)
        #expect(Self.authorization(headers) == "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
            + "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
            + "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
        #expect(headers.contains { $0 == ("x-amz-date", "20130524T000000Z") })
        #expect(headers.contains { $0 == ("x-amz-content-sha256", Self.emptyBodyHash) })
    }

    /// The key `test$file.text` checks the path's encoding (`$` is `%24`); the body's hash is the
    /// one the example gives for "Welcome to Amazon S3.".
    @Test func putObjectWithADollarInTheKey() {
        let body = Data("Welcome to Amazon S3.".utf8)
        #expect(SigV4Signer.payloadHash(body) == "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072")
        let request = SigV4Request(
            method: "PUT", path: "/test$file.text",
            headers: [Self.host, ("Date", "Fri, 24 May 2013 00:00:00 GMT"), ("x-amz-storage-class", "REDUCED_REDUNDANCY")]
        )
        let headers = Self.signer.authorizationHeaders(for: request, payloadHash: SigV4Signer.payloadHash(body), at: Self.exampleDate)
        #expect(Self.authorization(headers) == "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
            + "SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class,"
            + "Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd")
    }

    /// A query parameter without a value (`?lifecycle`) is signed as `lifecycle=`.
    @Test func getBucketLifecycle() {
        let request = SigV4Request(method: "GET", path: "/", query: [("lifecycle", "")], headers: [Self.host])
        let headers = Self.signer.authorizationHeaders(for: request, payloadHash: Self.emptyBodyHash, at: Self.exampleDate)
        #expect(Self.authorization(headers) == "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
            + "SignedHeaders=host;x-amz-content-sha256;x-amz-date,"
            + "Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543")
    }

    /// The query is given out of order: the canonical query sorts it by name.
    @Test func listObjectsSortsTheQuery() {
        let request = SigV4Request(method: "GET", path: "/", query: [("prefix", "J"), ("max-keys", "2")], headers: [Self.host])
        let headers = Self.signer.authorizationHeaders(for: request, payloadHash: Self.emptyBodyHash, at: Self.exampleDate)
        #expect(Self.authorization(headers) == "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
            + "SignedHeaders=host;x-amz-content-sha256;x-amz-date,"
            + "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7")
    }

    @Test func presignedGetURLOfTheQueryParametersPage() throws {
        let request = SigV4Request(method: "GET", path: "/test.txt", headers: [Self.host])
        let query = try Self.signer.presignedQuery(for: request, lifetimeSeconds: 86_400, at: Self.exampleDate)
        #expect(query == "X-Amz-Algorithm=AWS4-HMAC-SHA256"
            + "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
            + "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"
            + "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404")
        let endpoint = S3Endpoint(scheme: .https, host: "s3.amazonaws.com", region: "us-east-1", bucket: "examplebucket", addressing: .virtualHosted)
        #expect(endpoint.url(path: endpoint.path(ofKey: "test.txt"), canonicalQuery: query)
            == "https://examplebucket.s3.amazonaws.com/test.txt?" + query)
    }

    /// Temporary credentials: the token is sent and signed (a header, or a query parameter of a
    /// presigned URL), so a different token gives a different signature.
    @Test func temporaryCredentialsSignTheirSessionToken() throws {
        let temporary = SigV4Signer(
            credentials: S3Credentials(accessKeyID: "AKIAIOSFODNN7EXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", sessionToken: "token/one+="),
            region: "us-east-1"
        )
        let request = SigV4Request(method: "GET", path: "/test.txt", headers: [Self.host])
        let headers = temporary.authorizationHeaders(for: request, payloadHash: Self.emptyBodyHash, at: Self.exampleDate)
        #expect(headers.contains { $0 == ("x-amz-security-token", "token/one+=") })
        #expect(Self.authorization(headers)?.contains("SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token,") == true)
        let permanent = Self.signer.authorizationHeaders(for: request, payloadHash: Self.emptyBodyHash, at: Self.exampleDate)
        #expect(Self.authorization(headers) != Self.authorization(permanent))

        let query = try temporary.presignedQuery(for: request, lifetimeSeconds: 60, at: Self.exampleDate)
        #expect(query.contains("&X-Amz-Security-Token=token%2Fone%2B%3D&X-Amz-SignedHeaders=host&X-Amz-Signature="))
    }

    @Test func encodingKeepsOnlyTheUnreservedCharacters() {
        #expect(SigV4Encoding.component("a b/c+d~e_f-g.h*é") == "a%20b%2Fc%2Bd~e_f-g.h%2A%C3%A9")
        #expect(SigV4Encoding.path("/users/a b/photo+1.jpg") == "/users/a%20b/photo%2B1.jpg")
    }

    @Test func headerValuesAreTrimmedAndTheirSpacesCollapsed() {
        let spaced = SigV4Request(method: "GET", path: "/test.txt", headers: [("host", "  examplebucket.s3.amazonaws.com "), ("RANGE", "bytes=0-9  ")])
        let plain = SigV4Request(method: "GET", path: "/test.txt", headers: [Self.host, ("Range", "bytes=0-9")])
        #expect(Self.authorization(Self.signer.authorizationHeaders(for: spaced, payloadHash: Self.emptyBodyHash, at: Self.exampleDate))
            == Self.authorization(Self.signer.authorizationHeaders(for: plain, payloadHash: Self.emptyBodyHash, at: Self.exampleDate)))
    }

    @Test func presignedLifetimesAreBounded() throws {
        let request = SigV4Request(method: "GET", path: "/test.txt", headers: [Self.host])
        #expect(throws: S3SigningError.lifetimeOutOfRange(seconds: 604_801, allowed: 1...604_800)) {
            try Self.signer.presignedQuery(for: request, lifetimeSeconds: 604_801, at: Self.exampleDate)
        }
        let presigner = S3Presigner(
            endpoint: S3Endpoint(scheme: .http, host: "127.0.0.1", port: 7480, region: "us-east-1", bucket: "images", addressing: .pathStyle),
            credentials: Self.exampleCredentials
        )
        #expect(throws: S3SigningError.lifetimeOutOfRange(seconds: 901, allowed: 1...900)) {
            try presigner.get(key: "a.jpg", lifetime: .seconds(901), at: Self.exampleDate)
        }
        let url = try presigner.get(key: "users/u1/a b.jpg", lifetime: .seconds(900), at: Self.exampleDate)
        #expect(url.hasPrefix("http://127.0.0.1:7480/images/users/u1/a%20b.jpg?X-Amz-Algorithm=AWS4-HMAC-SHA256&"))
        #expect(url.contains("&X-Amz-Expires=900&X-Amz-SignedHeaders=host&"))
    }

    @Test func presignedPutSignsTheBodysLengthAndType() throws {
        let presigner = S3Presigner(
            endpoint: S3Endpoint(scheme: .https, host: "s3.amazonaws.com", region: "us-east-1", bucket: "examplebucket", addressing: .virtualHosted),
            credentials: Self.exampleCredentials
        )
        let url = try presigner.put(key: "test.txt", contentLength: 21, contentType: "text/plain", lifetime: .seconds(600), at: Self.exampleDate)
        #expect(url.hasPrefix("https://examplebucket.s3.amazonaws.com/test.txt?"))
        #expect(url.contains("&X-Amz-SignedHeaders=content-length%3Bcontent-type%3Bhost&"))
        let longer = try presigner.put(key: "test.txt", contentLength: 22, contentType: "text/plain", lifetime: .seconds(600), at: Self.exampleDate)
        #expect(url != longer)
    }

    @Test func credentialsNeverPrintTheirSecrets() {
        let credentials = S3Credentials(accessKeyID: "AKID", secretAccessKey: "very-secret", sessionToken: "session-secret")
        let printed = "\(credentials)"
        #expect(printed.contains("AKID"))
        #expect(!printed.contains("very-secret"))
        #expect(!printed.contains("session-secret"))
    }
}
