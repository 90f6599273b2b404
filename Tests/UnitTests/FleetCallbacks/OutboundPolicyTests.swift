@testable import FleetCallbacks
import FleetSupport
@testable import FleetTestSupport
import Foundation
import Testing

/// The allow-list and its SSRF checks without a request: which URLs pass, which addresses count
/// as internal, and the Standard Webhooks signature against the specification's own vector.
@Suite struct OutboundPolicyTests {
    func makePolicy(_ entries: [String], resolve: @escaping @Sendable (String) async throws -> [String] = OutboundPolicy.systemResolve) throws -> OutboundPolicy {
        OutboundPolicy(allowList: try OutboundPolicy.parse(entries: entries, variable: "FLEET_OUTBOUND_HOSTS"), resolve: resolve)
    }

    @Test func internalAddressesAreToldFromPublicOnes() {
        let internalAddresses = [
            "127.0.0.1", "127.8.9.1", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1", "169.254.169.254", "100.64.0.1",
            "0.0.0.0", "224.0.0.1", "255.255.255.255", "::1", "::", "fe80::1", "fd00:ec2::254", "fc00::1", "ff02::1",
            "::ffff:127.0.0.1", "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe",
        ]
        let external = ["93.184.216.34", "8.8.8.8", "172.32.0.1", "100.128.0.1", "2606:4700::1111", "::ffff:8.8.8.8"]
        for text in internalAddresses { #expect(IPAddress(text)?.isPublic == false, "\(text)") }
        for text in external { #expect(IPAddress(text)?.isPublic == true, "\(text)") }
        #expect(IPAddress("localhost") == nil)
        #expect(IPAddress("::0001")?.text == "::1")
    }

    @Test func onlyListedHostsAndPortsPass() throws {
        let policy = try makePolicy(["api.example.com", "hooks.example.com:8443", "127.0.0.1:9000", "[::1]:9001"])
        #expect(try policy.destination(of: "https://api.example.com/cron/trial-expiry?x=1").port == 443)
        #expect(try policy.destination(of: "http://API.example.com:8080/").host == "api.example.com")
        #expect(try policy.destination(of: "https://hooks.example.com:8443/h").port == 8443)
        #expect(throws: OutboundRefusal.hostNotAllowed(host: "hooks.example.com", port: 443)) { try policy.destination(of: "https://hooks.example.com/h") }
        #expect(throws: OutboundRefusal.hostNotAllowed(host: "evil.example.com", port: 443)) { try policy.destination(of: "https://evil.example.com/") }
        #expect(throws: OutboundRefusal.hostNotAllowed(host: "127.0.0.1", port: 9002)) { try policy.destination(of: "http://127.0.0.1:9002/") }
        #expect(throws: OutboundRefusal.hostNotAllowed(host: "169.254.169.254", port: 80)) { try policy.destination(of: "http://169.254.169.254/latest/meta-data/") }
        #expect(throws: OutboundRefusal.hostNotAllowed(host: "::1", port: 9000)) { try policy.destination(of: "http://[::1]:9000/") }
        #expect(try policy.destination(of: "http://[::1]:9001/").host == "::1")
        #expect(throws: OutboundRefusal.credentialsInURL) { try policy.destination(of: "https://user:pw@api.example.com/") }
        #expect(throws: OutboundRefusal.notHTTP) { try policy.destination(of: "ftp://api.example.com/") }
        #expect(throws: OutboundRefusal.notHTTP) { try policy.destination(of: "file:///etc/passwd") }
        #expect(throws: OutboundRefusal.hostNotAllowed(host: "1.2.3.4", port: 443)) { try OutboundPolicy.closed.destination(of: "https://1.2.3.4/") }
        #expect(throws: ConfigurationError.self) { try OutboundPolicy.parse(entries: ["ex ample.com"], variable: "FLEET_OUTBOUND_HOSTS") }
    }

    @Test func aNameResolvingInsideIsRefusedUnlessTheAddressItselfIsListed() async throws {
        // localhost is a DNS name resolving to loopback: listing the name does not allow loopback.
        let localhost = try makePolicy(["localhost:9000"])
        let refusal = await #expect(throws: OutboundRefusal.self) { _ = try await localhost.pinnedAddress(for: "http://localhost:9000/") }
        guard case .internalAddress(host: "localhost", let address)? = refusal else { throw TestFailure("\(String(describing: refusal))") }
        #expect(IPAddress(address)?.isPublic == false)
        // A name the resolver points at the metadata service, or at a public and a private address.
        let metadata = try makePolicy(["metadata.test", "mixed.test", "public.test"]) { host in
            switch host {
            case "metadata.test": ["169.254.169.254"]
            case "mixed.test": ["93.184.216.34", "10.0.0.7"]
            default: ["93.184.216.34"]
            }
        }
        await #expect(throws: OutboundRefusal.internalAddress(host: "metadata.test", address: "169.254.169.254")) {
            _ = try await metadata.pinnedAddress(for: "http://metadata.test/latest/meta-data/")
        }
        await #expect(throws: OutboundRefusal.internalAddress(host: "mixed.test", address: "10.0.0.7")) {
            _ = try await metadata.pinnedAddress(for: "https://mixed.test/")
        }
        // The public one is pinned: the connection goes to the address checked.
        #expect(try await metadata.pinnedAddress(for: "https://public.test/").address == "93.184.216.34")
        // An address listed itself passes, and needs no pin.
        #expect(try await makePolicy(["127.0.0.1:9000"]).pinnedAddress(for: "http://127.0.0.1:9000/x").address == nil)
        // A name pointing at an address the list names itself passes, pinned to it.
        let listed = try makePolicy(["internal.test", "10.0.0.7"]) { _ in ["10.0.0.7"] }
        #expect(try await listed.pinnedAddress(for: "http://internal.test/").address == "10.0.0.7")
        // Unresolvable: may pass later, so it is not permanent.
        let nowhere = try makePolicy(["nowhere.test"]) { _ in [] }
        await #expect(throws: OutboundRefusal.unresolvable(host: "nowhere.test", reason: "no address")) {
            _ = try await nowhere.pinnedAddress(for: "http://nowhere.test/")
        }
        #expect(!OutboundRefusal.unresolvable(host: "nowhere.test", reason: "").isPermanent)
    }

    @Test func signaturesMatchTheStandardWebhooksVectorAndARotationSignsWithBoth() throws {
        // The specification's reference libraries test this vector; clients/node verifies it too.
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
        let body = Data(#"{"test": 2432232314}"#.utf8)
        let signer = try StandardWebhook(secrets: [secret])
        #expect(signer.signature(id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: "1614265330", body: body) == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")

        let next = OutboundRig.secret()
        let rotating = try StandardWebhook(secrets: [next, secret])
        let headers = Dictionary(uniqueKeysWithValues: rotating.headers(id: "msg_1", timestamp: Date(), body: body).map { ($0.name, $0.value) })
        #expect(headers["webhook-signature"]?.split(separator: " ").count == 2)
        // A receiver that holds either secret verifies it.
        #expect(try StandardWebhook(secrets: [secret]).verify(headers: headers, body: body) == "msg_1")
        #expect(try StandardWebhook(secrets: [next]).verify(headers: headers, body: body) == "msg_1")
        #expect(throws: StandardWebhookError.invalidSignature) { try StandardWebhook(secrets: [OutboundRig.secret()]).verify(headers: headers, body: body) }
        #expect(throws: StandardWebhookError.invalidSignature) { try StandardWebhook(secrets: [secret]).verify(headers: headers, body: body + Data(" ".utf8)) }
        #expect(throws: StandardWebhookError.malformedSecret) { try StandardWebhook(secrets: ["whsec_c2hvcnQ="]) }
        #expect(throws: ConfigurationError.self) {
            try OutboundSettings.load(from: ["FLEET_OUTBOUND_HOSTS": "api.example.com"])  // hosts but no secret
        }
        #expect(try OutboundSettings.load(from: [:]).isOn == false)
        // HTTP jobs: their own secret, optional (without it they are refused at submission), never a callback one.
        let hosts = "api.example.com"
        let callbacksOnly = try OutboundSettings.load(from: ["FLEET_OUTBOUND_HOSTS": hosts, "FLEET_CALLBACK_SECRET": secret])
        #expect(callbacksOnly.isOn && callbacksOnly.httpJobSigner == nil)
        let both = try OutboundSettings.load(from: ["FLEET_OUTBOUND_HOSTS": hosts, "FLEET_CALLBACK_SECRET": secret, "FLEET_HTTP_JOB_SECRET": next])
        #expect(both.httpJobSigner != nil)
        #expect(throws: ConfigurationError.self) {
            try OutboundSettings.load(from: ["FLEET_OUTBOUND_HOSTS": hosts, "FLEET_CALLBACK_SECRET": secret, "FLEET_HTTP_JOB_SECRET": secret])
        }
        #expect(throws: ConfigurationError.self) {
            try OutboundSettings.load(from: [
                "FLEET_OUTBOUND_HOSTS": hosts, "FLEET_CALLBACK_SECRET": next, "FLEET_CALLBACK_PREVIOUS_SECRET": secret, "FLEET_HTTP_JOB_SECRET": secret,
            ])
        }
        #expect(throws: ConfigurationError.self) {
            try OutboundSettings.load(from: [
                "FLEET_OUTBOUND_HOSTS": hosts, "FLEET_CALLBACK_SECRET": secret, "FLEET_HTTP_JOB_SECRET": next,
                "FLEET_HTTP_JOB_PREVIOUS_SECRET": "whsec_c2hvcnQ=",
            ])
        }
    }
}
