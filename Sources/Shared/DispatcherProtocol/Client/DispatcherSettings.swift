import FleetSupport

/// The dispatcher's socket settings, read from the environment (`docs/configuration.md`). The
/// server reads all of them; the CLI reads the addresses and the token.
public struct DispatcherSettings: Sendable {
    /// nil: no TCP listener.
    public var tcp: DispatcherAddress?
    /// nil: no Unix socket.
    public var socketPath: String?
    /// Permissions of the Unix socket file: who may connect without a token.
    public var socketMode: UInt16
    /// The shared secret TCP clients send with `auth`. Never logged.
    public var token: String?
    public var maxFrameBytes: Int
    /// A frame must be completed within this time of its first byte.
    public var frameTimeout: Duration
    /// A connection with nothing in flight that sends nothing for this long is closed.
    public var idleTimeout: Duration
    /// A connection whose answers wait this long with none read by its client is closed.
    public var writeTimeout: Duration
    public var maxConnections: Int
    /// Requests of one connection running at once; reading pauses beyond that.
    public var maxInFlight: Int
    /// Whether single enqueues arriving together share one insert and one commit (group commit,
    /// `docs/queue.md`); off: a commit per enqueue.
    public var groupCommit: Switch
    /// TLS on the TCP listener (the server's side); nil: plain TCP.
    public var serverTLS: DispatcherTLS.Server?
    /// TLS for a client connecting over TCP (the CLI's side); nil: plain TCP.
    public var clientTLS: DispatcherTLS.Client?

    public static let defaultTCP = DispatcherAddress.tcp(host: "127.0.0.1", port: 7420)
    public static let defaultSocketPath = ".data/dispatcher.sock"
    public static let minimumTokenBytes = 16

    public static func load(from environment: [String: String]) throws -> DispatcherSettings {
        let reader = EnvironmentReader(environment: environment)
        return DispatcherSettings(
            tcp: try address(environment["FLEET_DISPATCHER_TCP"]),
            socketPath: socketPath(environment["FLEET_DISPATCHER_SOCKET"]),
            socketMode: try socketMode(environment["FLEET_DISPATCHER_SOCKET_MODE"]),
            token: environment["FLEET_DISPATCHER_TOKEN"].flatMap { $0.isEmpty ? nil : $0 },
            maxFrameBytes: try reader.integer("FLEET_DISPATCHER_MAX_FRAME_BYTES", default: WireFormat.defaultMaxFrameBytes,
                                              range: 1024...(64 << 20)),
            frameTimeout: try reader.duration("FLEET_DISPATCHER_FRAME_TIMEOUT_MS", unit: .milliseconds(1), default: 10_000, range: 10...600_000),
            idleTimeout: try reader.duration("FLEET_DISPATCHER_IDLE_TIMEOUT_SECONDS", unit: .seconds(1), default: 300, range: 1...86_400),
            writeTimeout: try reader.duration("FLEET_DISPATCHER_WRITE_TIMEOUT_MS", unit: .milliseconds(1), default: 10_000, range: 100...600_000),
            maxConnections: try reader.integer("FLEET_DISPATCHER_MAX_CONNECTIONS", default: 1024, range: 1...100_000),
            maxInFlight: try reader.integer("FLEET_DISPATCHER_MAX_IN_FLIGHT", default: 64, range: 1...10_000),
            groupCommit: try reader.choice("FLEET_DISPATCHER_GROUP_COMMIT", default: Switch.on),
            serverTLS: try DispatcherTLS.server(environment),
            clientTLS: try DispatcherTLS.client(environment))
    }

    public enum Switch: String, Sendable {
        case on, off
    }

    /// What a server needs beyond `load`: a token strong enough to guard the TCP listener.
    public func validateForServer() throws {
        guard tcp != nil else { return }
        guard let token else {
            throw ConfigurationError(variable: "FLEET_DISPATCHER_TOKEN",
                                     reason: "required while the TCP listener is on (set FLEET_DISPATCHER_TCP=off to serve only the Unix socket)")
        }
        guard token.utf8.count >= Self.minimumTokenBytes else {
            throw ConfigurationError(variable: "FLEET_DISPATCHER_TOKEN", reason: "shorter than \(Self.minimumTokenBytes) bytes")
        }
    }

    /// Where a client connects by default: the Unix socket if there is one (no token needed), else TCP.
    public var clientAddress: DispatcherAddress? {
        socketPath.map { .unix(path: $0) } ?? tcp
    }

    /// A listener variable: unset (the default), `off`, or a value.
    private enum Listener {
        case unset, off, value(String)

        init(_ text: String?) {
            guard let text, !text.isEmpty else { self = .unset; return }
            self = text.lowercased() == "off" ? .off : .value(text)
        }
    }

    private static func socketPath(_ text: String?) -> String? {
        switch Listener(text) {
        case .unset: defaultSocketPath
        case .off: nil
        case .value(let path): path
        }
    }

    private static func address(_ text: String?) throws -> DispatcherAddress? {
        switch Listener(text) {
        case .unset: return defaultTCP
        case .off: return nil
        case .value(let value):
            guard let address = DispatcherAddress(value), case .tcp = address else {
                throw ConfigurationError(variable: "FLEET_DISPATCHER_TCP", reason: "'\(value)' is not host:port or off")
            }
            return address
        }
    }

    private static func socketMode(_ text: String?) throws -> UInt16 {
        guard let text, !text.isEmpty else { return 0o600 }
        guard let mode = UInt16(text, radix: 8), mode <= 0o777 else {
            throw ConfigurationError(variable: "FLEET_DISPATCHER_SOCKET_MODE", reason: "'\(text)' is not an octal mode such as 0600 or 0660")
        }
        return mode
    }
}
