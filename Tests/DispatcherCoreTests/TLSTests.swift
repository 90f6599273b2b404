@testable import DispatcherCore
import DispatcherProtocol
import FleetSupport
@testable import FleetTestSupport
import Foundation
import Testing

/// TLS on the dispatcher's TCP listener, with a throwaway CA made by each test (openssl).
@Suite struct TLSTests {
    @Test func aServerWithTLSServesClientsThatVerifyIt() async throws {
        let certificates = try await Certificates.make()
        try await TestDispatcher.run({ $0.serverTLS = certificates.server; $0.idleTimeout = .seconds(2) }) { dispatcher in
            let client = try await DispatcherClient.connect(to: dispatcher.tcp, token: TestDispatcher.token, tls: .init(caPath: certificates.path("ca.pem")))
            #expect(try await client.stats().windowSeconds == 3600, "authenticated over TLS")
            // By name as well as by address.
            guard case .tcp(_, let port) = dispatcher.tcp else { return }
            _ = try await DispatcherClient.connect(to: .tcp(host: "localhost", port: port), token: TestDispatcher.token,
                                                   tls: .init(caPath: certificates.path("ca.pem"))).ping()
            // A client that trusts another CA refuses the server; a plain client gets no greeting.
            await #expect(throws: (any Error).self) {
                _ = try await DispatcherClient.connect(to: dispatcher.tcp, token: TestDispatcher.token, tls: .init(caPath: certificates.path("other-ca.pem")))
            }
            // Closed by the server (its 2 s idle timeout here; 30 s seen on a loaded CI machine,
            // where the close waits on the TLS handler's shutdown): the deadline only tells a hang.
            try await withDeadline(.seconds(120), "the server's close of a plain client") {
                await #expect(throws: (any Error).self) { _ = try await DispatcherClient.connect(to: dispatcher.tcp, token: TestDispatcher.token) }
            }
            // The Unix socket stays as it is.
            _ = try await dispatcher.client(.unix).ping()
        }
    }

    @Test func mutualTLSRefusesClientsWithoutACertificateOfTheCA() async throws {
        let certificates = try await Certificates.make()
        var server = certificates.server
        server.clientCAPath = certificates.path("ca.pem")
        try await TestDispatcher.run({ [server] in $0.serverTLS = server }) { dispatcher in
            func connect(_ certificate: String?) async throws -> DispatcherClient {
                try await DispatcherClient.connect(
                    to: dispatcher.tcp, token: TestDispatcher.token,
                    tls: .init(caPath: certificates.path("ca.pem"), certificatePath: certificate.map { certificates.path("\($0).pem") },
                               keyPath: certificate.map { certificates.path("\($0).key") }))
            }
            _ = try await connect("client").ping()
            await #expect(throws: (any Error).self) { _ = try await connect(nil).ping() }
            await #expect(throws: (any Error).self) { _ = try await connect("stranger").ping() }
        }
    }

    /// The CLI reads FLEET_DISPATCHER_TLS_CA and verifies the server.
    @Test func theCommandLineConnectsWithTLS() async throws {
        let certificates = try await Certificates.make()
        try await TestDispatcher.run({ $0.serverTLS = certificates.server }) { dispatcher in
            var environment = ProcessInfo.processInfo.environment
            environment["FLEET_DISPATCHER_TOKEN"] = TestDispatcher.token
            let output = temporaryPath("cli") + ".out"
            for (ca, expected) in [("ca.pem", Int32(0)), ("other-ca.pem", Int32(1))] {
                environment["FLEET_DISPATCHER_TLS_CA"] = certificates.path(ca)
                let status = try await ChildProcess.run(builtExecutable("dispatcher"), ["stats", "--dispatcher", "\(dispatcher.tcp)"],
                                                        environment: environment, outputPath: output)
                #expect(status == expected, "\(ca): \((try? String(contentsOfFile: output, encoding: .utf8)) ?? "")")
            }
        }
    }

    @Test func halfATLSConfigurationIsRefusedAtStart() throws {
        #expect(throws: ConfigurationError.self) { try DispatcherSettings.load(from: ["FLEET_DISPATCHER_TLS_CERT": "/x.pem"]) }
        #expect(throws: ConfigurationError.self) { try DispatcherSettings.load(from: ["FLEET_DISPATCHER_TLS_CLIENT_CA": "/ca.pem"]) }
        #expect(throws: ConfigurationError.self) { try DispatcherSettings.load(from: ["FLEET_DISPATCHER_TLS_CLIENT_CERT": "/c.pem"]) }
        let both = try DispatcherSettings.load(from: ["FLEET_DISPATCHER_TLS_CERT": "/s.pem", "FLEET_DISPATCHER_TLS_KEY": "/s.key"])
        #expect(both.serverTLS == DispatcherTLS.Server(certificatePath: "/s.pem", keyPath: "/s.key"))
    }

    /// A CA, a server certificate for 127.0.0.1 and localhost, a client certificate, and a second
    /// CA with a client certificate of its own.
    struct Certificates {
        let folder: String

        func path(_ name: String) -> String { "\(folder)/\(name)" }
        var server: DispatcherTLS.Server { DispatcherTLS.Server(certificatePath: path("server.pem"), keyPath: path("server.key")) }

        static func make() async throws -> Certificates {
            let certificates = Certificates(folder: temporaryPath("tls"))
            try FileManager.default.createDirectory(atPath: certificates.folder, withIntermediateDirectories: true)
            try "subjectAltName=IP:127.0.0.1,DNS:localhost\n".write(toFile: certificates.path("server.ext"), atomically: true, encoding: .utf8)
            try "extendedKeyUsage=clientAuth\n".write(toFile: certificates.path("client.ext"), atomically: true, encoding: .utf8)
            let newKey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
            for ca in ["ca", "other-ca"] {
                try await certificates.openssl(["req", "-x509"] + newKey + [
                    "-keyout", certificates.path("\(ca).key"), "-out", certificates.path("\(ca).pem"), "-days", "1", "-subj", "/CN=\(ca)"])
            }
            for (name, ca, ext) in [("server", "ca", "server.ext"), ("client", "ca", "client.ext"), ("stranger", "other-ca", "client.ext")] {
                try await certificates.openssl(["req"] + newKey + [
                    "-keyout", certificates.path("\(name).key"), "-out", certificates.path("\(name).csr"), "-subj", "/CN=\(name)"])
                try await certificates.openssl([
                    "x509", "-req", "-in", certificates.path("\(name).csr"), "-CA", certificates.path("\(ca).pem"),
                    "-CAkey", certificates.path("\(ca).key"), "-CAcreateserial", "-out", certificates.path("\(name).pem"),
                    "-days", "1", "-extfile", certificates.path(ext)])
            }
            return certificates
        }

        private func openssl(_ arguments: [String]) async throws {
            let log = path("openssl.log")
            let status = try await ChildProcess.run("/usr/bin/openssl", arguments, outputPath: log)
            guard status == 0 else { throw TestFailure("openssl \(arguments.joined(separator: " ")): \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")") }
        }
    }
}
