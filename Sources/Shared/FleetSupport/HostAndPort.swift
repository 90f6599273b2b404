/// `host:port` or `[v6]:port`, as the listeners and the dispatcher's address take them.
public struct HostAndPort: Sendable, Equatable {
    public let host: String
    public let port: Int

    /// Nil unless the text ends in `:port` (0-65535) after a non-empty host.
    public init?(_ text: String) {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (0...65535).contains(port) else {
            return nil
        }
        var host = String(text[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { return nil }
        self.host = host
        self.port = port
    }
}
