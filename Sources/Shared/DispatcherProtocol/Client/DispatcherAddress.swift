import FleetSupport

/// Where a dispatcher listens.
public enum DispatcherAddress: Sendable, Equatable, CustomStringConvertible {
    case tcp(host: String, port: Int)
    case unix(path: String)

    /// `host:port`, `[v6]:port`, or a path (anything containing a "/").
    public init?(_ text: String) {
        if text.contains("/") {
            self = .unix(path: text)
            return
        }
        guard let address = HostAndPort(text) else { return nil }
        self = .tcp(host: address.host, port: address.port)
    }

    public var isTCP: Bool {
        if case .tcp = self { true } else { false }
    }

    /// A TCP address on the loopback interface, where plain TCP never leaves the machine.
    public var isLoopback: Bool {
        guard case .tcp(let host, _) = self else { return false }
        return host == "localhost" || host == "::1" || host.hasPrefix("127.")
    }

    public var description: String {
        switch self {
        case .tcp(let host, let port): host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        case .unix(let path): path
        }
    }
}
