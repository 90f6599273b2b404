import FleetHTTPClient
import FleetStorage
import Foundation
import Testing

/// The signer and the presigner against a real S3 implementation: the Ceph RADOS gateway of
/// `scripts/s3.sh`, reached with libcurl (`CurlHTTPClient`). The gateway refuses a request whose
/// signature it does not compute itself, so each accepted request is the signer agreeing with it.
@Suite struct S3GatewaySigningTests {
    let http = CurlHTTPClient()

    /// A key of its own for each test (the gateway is shared by runs), with characters the
    /// encoding must get right: a space, a plus, a dollar.
    static func freshKey(_ name: String) -> String {
        "groundwork/\(UUID().uuidString)/\(name) +$.bin"
    }

    static func randomBytes(_ count: Int) -> Data {
        Data((0..<count).map { _ in UInt8.random(in: 0...255) })
    }

    /// A request to `key` signed in its `Authorization` header.
    func signed(
        _ method: HTTPClientRequest.Method, key: String, body: Data? = nil, gateway: S3Gateway.Connection,
        credentials: S3Credentials? = nil
    ) -> HTTPClientRequest {
        let endpoint = gateway.endpoint
        let signer = SigV4Signer(credentials: credentials ?? gateway.credentials, region: endpoint.region)
        let path = endpoint.path(ofKey: key)
        let request = SigV4Request(method: method.rawValue, path: path, headers: [("host", endpoint.hostHeader)])
        let headers = signer.authorizationHeaders(for: request, payloadHash: SigV4Signer.payloadHash(body ?? Data()), at: Date())
        return HTTPClientRequest(method: method, url: endpoint.url(path: path, canonicalQuery: ""), headers: headers, body: body)
    }

    @Test func aSignedPutIsReadBackByteEqualAndUnsignedOrWronglySignedRequestsAreRefused() async throws {
        let gateway = try await S3Gateway.connection()
        let key = Self.freshKey("signed")
        let bytes = Self.randomBytes(300_000)

        let put = try await http.execute(signed(.put, key: key, body: bytes, gateway: gateway))
        #expect(put.status == 200, "\(String(decoding: put.body, as: UTF8.self))")
        let get = try await http.execute(signed(.get, key: key, gateway: gateway))
        #expect(get.status == 200)
        #expect(get.body == bytes)

        let unsigned = try await http.execute(HTTPClientRequest(url: gateway.endpoint.url(path: gateway.endpoint.path(ofKey: key), canonicalQuery: "")))
        #expect(unsigned.status == 403)
        let wrongSecret = S3Credentials(accessKeyID: gateway.credentials.accessKeyID, secretAccessKey: "not-the-secret")
        let forged = try await http.execute(signed(.get, key: key, gateway: gateway, credentials: wrongSecret))
        #expect(forged.status == 403)
        #expect(String(decoding: forged.body, as: UTF8.self).contains("SignatureDoesNotMatch"))
    }

    /// A presigned URL carries the whole authorisation: libcurl with no keys GETs the object, and
    /// PUTs exactly the signed length and type, and nothing else.
    @Test func presignedURLsWorkWithoutCredentials() async throws {
        let gateway = try await S3Gateway.connection()
        let presigner = S3Presigner(endpoint: gateway.endpoint, credentials: gateway.credentials)
        let key = Self.freshKey("presigned")
        let bytes = Self.randomBytes(70_000)

        let putURL = try presigner.put(key: key, contentLength: bytes.count, contentType: "image/jpeg", lifetime: .seconds(300))
        let longer = try await http.execute(HTTPClientRequest(
            method: .put, url: putURL, headers: [("Content-Type", "image/jpeg")], body: bytes + Data([0])
        ))
        #expect(longer.status == 403)
        let otherType = try await http.execute(HTTPClientRequest(
            method: .put, url: putURL, headers: [("Content-Type", "image/png")], body: bytes
        ))
        #expect(otherType.status == 403)
        let put = try await http.execute(HTTPClientRequest(method: .put, url: putURL, headers: [("Content-Type", "image/jpeg")], body: bytes))
        #expect(put.status == 200, "\(String(decoding: put.body, as: UTF8.self))")

        let get = try await http.execute(HTTPClientRequest(url: try presigner.get(key: key, lifetime: .seconds(300))))
        #expect(get.status == 200)
        #expect(get.body == bytes)
        #expect(get.headers["content-type"] == "image/jpeg")

        // The signature covers the key: the same query on another key is refused.
        let otherKey = try presigner.get(key: key, lifetime: .seconds(300)).replacingOccurrences(of: "presigned", with: "signed")
        #expect(try await http.execute(HTTPClientRequest(url: otherKey)).status == 403)
    }
}
