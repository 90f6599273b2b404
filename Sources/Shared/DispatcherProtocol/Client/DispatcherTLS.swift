import FleetSupport
import NIOSSL

/// TLS on the dispatcher's TCP socket (`docs/protocol.md`, "TLS"). PEM files, read when the
/// server binds or the client connects.
public enum DispatcherTLS {
    /// The server's side: its certificate chain and key, and optionally the CA whose
    /// certificates clients must present (mutual TLS).
    public struct Server: Sendable, Equatable {
        public var certificatePath: String
        public var keyPath: String
        /// Set: a client without a certificate this CA signed is refused during the handshake.
        public var clientCAPath: String?

        public init(certificatePath: String, keyPath: String, clientCAPath: String? = nil) {
            self.certificatePath = certificatePath
            self.keyPath = keyPath
            self.clientCAPath = clientCAPath
        }

        package func makeContext() throws -> NIOSSLContext {
            var configuration = TLSConfiguration.makeServerConfiguration(
                certificateChain: try NIOSSLCertificate.fromPEMFile(certificatePath).map { .certificate($0) },
                privateKey: .privateKey(try NIOSSLPrivateKey(file: keyPath, format: .pem)))
            configuration.minimumTLSVersion = .tlsv12
            if let clientCAPath {
                // The client's certificate is checked against the CA; clients have no host name to match.
                configuration.certificateVerification = .noHostnameVerification
                configuration.trustRoots = .file(clientCAPath)
            }
            return try NIOSSLContext(configuration: configuration)
        }
    }

    /// A client's side: the CA that signed the server's certificate (verified, with the host
    /// name or IP address the client connects to), and optionally its own certificate and key.
    public struct Client: Sendable, Equatable {
        public var caPath: String
        public var certificatePath: String?
        public var keyPath: String?

        public init(caPath: String, certificatePath: String? = nil, keyPath: String? = nil) {
            self.caPath = caPath
            self.certificatePath = certificatePath
            self.keyPath = keyPath
        }

        package func makeContext() throws -> NIOSSLContext {
            var configuration = TLSConfiguration.makeClientConfiguration()
            configuration.minimumTLSVersion = .tlsv12
            configuration.certificateVerification = .fullVerification
            configuration.trustRoots = .file(caPath)
            if let certificatePath, let keyPath {
                configuration.certificateChain = try NIOSSLCertificate.fromPEMFile(certificatePath).map { .certificate($0) }
                configuration.privateKey = .privateKey(try NIOSSLPrivateKey(file: keyPath, format: .pem))
            }
            return try NIOSSLContext(configuration: configuration)
        }

        /// The name sent for SNI and matched against the certificate; nil for an IP address,
        /// which is then matched against the certificate's IP addresses.
        static func serverName(_ host: String) -> String? {
            host.contains(":") || host.split(separator: ".").allSatisfy({ UInt8($0) != nil }) ? nil : host
        }
    }

    static func server(_ environment: [String: String]) throws -> Server? {
        let certificate = environment["FLEET_DISPATCHER_TLS_CERT"].flatMap { $0.isEmpty ? nil : $0 }
        let key = environment["FLEET_DISPATCHER_TLS_KEY"].flatMap { $0.isEmpty ? nil : $0 }
        let clientCA = environment["FLEET_DISPATCHER_TLS_CLIENT_CA"].flatMap { $0.isEmpty ? nil : $0 }
        switch (certificate, key) {
        case (nil, nil):
            if clientCA != nil {
                throw ConfigurationError(variable: "FLEET_DISPATCHER_TLS_CLIENT_CA", reason: "needs FLEET_DISPATCHER_TLS_CERT and FLEET_DISPATCHER_TLS_KEY")
            }
            return nil
        case (let certificate?, let key?): return Server(certificatePath: certificate, keyPath: key, clientCAPath: clientCA)
        case (nil, _): throw ConfigurationError(variable: "FLEET_DISPATCHER_TLS_CERT", reason: "required with FLEET_DISPATCHER_TLS_KEY")
        case (_, nil): throw ConfigurationError(variable: "FLEET_DISPATCHER_TLS_KEY", reason: "required with FLEET_DISPATCHER_TLS_CERT")
        }
    }

    static func client(_ environment: [String: String]) throws -> Client? {
        let ca = environment["FLEET_DISPATCHER_TLS_CA"].flatMap { $0.isEmpty ? nil : $0 }
        let certificate = environment["FLEET_DISPATCHER_TLS_CLIENT_CERT"].flatMap { $0.isEmpty ? nil : $0 }
        let key = environment["FLEET_DISPATCHER_TLS_CLIENT_KEY"].flatMap { $0.isEmpty ? nil : $0 }
        guard let ca else {
            if certificate != nil || key != nil {
                throw ConfigurationError(variable: "FLEET_DISPATCHER_TLS_CA", reason: "required with a client certificate")
            }
            return nil
        }
        guard (certificate == nil) == (key == nil) else {
            throw ConfigurationError(variable: "FLEET_DISPATCHER_TLS_CLIENT_CERT", reason: "and FLEET_DISPATCHER_TLS_CLIENT_KEY go together")
        }
        return Client(caPath: ca, certificatePath: certificate, keyPath: key)
    }
}
