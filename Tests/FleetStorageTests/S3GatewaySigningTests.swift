import FleetHTTPClient
import FleetStorage
@testable import FleetTestSupport
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

    @Test func aSignedPutIsReadBackByteEqualAndUnsignedOrWronglySignedRequestsAreRefused() async throws {
        let gateway = try await S3Gateway.connection()
        let key = Self.freshKey("signed")
        let bytes = Self.randomBytes(300_000)

        let put = try await http.execute(gateway.signed(.put, key: key, body: bytes))
        #expect(put.status == 200, "\(String(decoding: put.body, as: UTF8.self))")
        let get = try await http.execute(gateway.signed(.get, key: key))
        #expect(get.status == 200)
        #expect(get.body == bytes)

        let unsigned = try await http.execute(HTTPClientRequest(url: gateway.endpoint.url(path: gateway.endpoint.path(ofKey: key), canonicalQuery: "")))
        #expect(unsigned.status == 403)
        let wrongSecret = S3Credentials(accessKeyID: gateway.credentials.accessKeyID, secretAccessKey: "not-the-secret")
        let forged = try await http.execute(gateway.signed(.get, key: key, credentials: wrongSecret))
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
