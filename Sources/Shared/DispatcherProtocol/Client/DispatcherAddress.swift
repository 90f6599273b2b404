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

    public var description: String {
        switch self {
        case .tcp(let host, let port): host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        case .unix(let path): path
        }
    }
}
