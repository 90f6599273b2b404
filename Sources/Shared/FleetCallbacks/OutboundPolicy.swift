import FleetQueue
import FleetSupport
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Which URLs the fleet may call on others' behalf (callbacks, HTTP jobs), so nobody makes it
/// reach its own network (SSRF). A URL must be `http(s)`, without credentials, to a host the
/// allow-list names (`FLEET_OUTBOUND_HOSTS`); at send time the host is resolved here and every
/// address it has must be public, unless an allow-list entry names that address itself
/// (`127.0.0.1:8080`): loopback, private, link-local (the cloud metadata service at
/// 169.254.169.254), unique-local, multicast and reserved addresses are refused. The address
/// checked is the one connected to (`HTTPClientRequest.pinnedAddress`), and redirects are
/// never followed, so neither DNS nor the receiver can lead the request elsewhere.
public struct OutboundPolicy: Sendable {
    public let allowList: [AllowedHost]
    /// Host name to its addresses (numeric text); getaddrinfo in production.
    private let resolve: @Sendable (String) async throws -> [String]

    public struct AllowedHost: Sendable, Equatable, CustomStringConvertible {
        /// Lower-cased; an IPv6 address without brackets.
        public let host: String
        /// Nil: any port.
        public let port: Int?
        /// The entry is an IP address: that address is allowed whatever its class.
        public var isAddress: Bool { IPAddress(host) != nil }

        public var description: String {
            let shown = host.contains(":") ? "[\(host)]" : host
            return port.map { "\(shown):\($0)" } ?? shown
        }
    }

    /// Nothing is allowed: callbacks and HTTP jobs are refused.
    public static let closed = OutboundPolicy(allowList: [])

    public init(allowList: [AllowedHost], resolve: @escaping @Sendable (String) async throws -> [String] = OutboundPolicy.systemResolve) {
        self.allowList = allowList
        self.resolve = resolve
    }

    /// `host`, `host:port`, `[v6]` or `[v6]:port` entries.
    public static func parse(entries: [String], variable: String) throws -> [AllowedHost] {
        try entries.map { entry in
            if IPAddress(entry) != nil { return AllowedHost(host: try normalised(entry, variable: variable), port: nil) }
            if entry.hasPrefix("["), entry.hasSuffix("]") {
                return AllowedHost(host: try normalised(String(entry.dropFirst().dropLast()), variable: variable), port: nil)
            }
            if let withPort = HostAndPort(entry) {
                return AllowedHost(host: try normalised(withPort.host, variable: variable), port: withPort.port)
            }
            return AllowedHost(host: try normalised(entry, variable: variable), port: nil)
        }
    }

    private static func normalised(_ host: String, variable: String) throws -> String {
        if let address = IPAddress(host) { return address.text }
        let lowered = host.lowercased()
        guard !lowered.isEmpty, lowered.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "." || $0 == "-" }) else {
            throw ConfigurationError(variable: variable, reason: "'\(host)' is not a host name or IP address")
        }
        return lowered
    }

    /// A URL's parts the policy looks at.
    public struct Destination: Sendable, Equatable {
        public let url: String
        /// Lower-cased; an IPv6 address without brackets.
        public let host: String
        public let port: Int
        public let entry: AllowedHost
    }

    /// The checks that need no DNS: what `enqueue` and `render.request` make before accepting a URL.
    public func destination(of url: String) throws(OutboundRefusal) -> Destination {
        guard url.utf8.count <= 2048, let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
              scheme == "http" || scheme == "https", var host = components.host, !host.isEmpty
        else { throw .notHTTP }
        guard components.user == nil, components.password == nil else { throw .credentialsInURL }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        host = IPAddress(host)?.text ?? host.lowercased()
        let port = components.port ?? (scheme == "https" ? 443 : 80)
        guard let entry = allowList.first(where: { $0.host == host && ($0.port == nil || $0.port == port) }) else {
            throw .hostNotAllowed(host: host, port: port)
        }
        return Destination(url: url, host: host, port: port, entry: entry)
    }

    /// The address to connect to for `url`, checked: nil for a URL whose host is an address (it
    /// cannot resolve elsewhere), the first of the host's addresses otherwise.
    public func pinnedAddress(for url: String) async throws(OutboundRefusal) -> (destination: Destination, address: String?) {
        let destination = try self.destination(of: url)
        if let literal = IPAddress(destination.host) {
            // Listed as itself: allowed whatever its class. Listed only as a name cannot happen
            // (the entry matched on the literal text), so this is the literal entry.
            guard destination.entry.isAddress || literal.isPublic else { throw .internalAddress(host: destination.host, address: literal.text) }
            return (destination, nil)
        }
        let addresses: [String]
        do {
            addresses = try await resolve(destination.host)
        } catch {
            throw (error as? OutboundRefusal) ?? .unresolvable(host: destination.host, reason: "\(error)")
        }
        guard !addresses.isEmpty else { throw .unresolvable(host: destination.host, reason: "no address") }
        for text in addresses {
            guard let address = IPAddress(text) else { throw .unresolvable(host: destination.host, reason: "unreadable address \(text)") }
            let listedItself = allowList.contains { $0.host == address.text && ($0.port == nil || $0.port == destination.port) }
            // Every address must pass, not only the one used: a name that also points inside is refused whole.
            guard address.isPublic || listedItself else { throw .internalAddress(host: destination.host, address: address.text) }
        }
        return (destination, IPAddress(addresses[0])!.text)
    }

    /// getaddrinfo, off the cooperative pool.
    public static let systemResolve: @Sendable (String) async throws -> [String] = { host in
        try await offload(on: blockingIO) {
            var hints = addrinfo()
            hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
            var list: UnsafeMutablePointer<addrinfo>?
            let status = getaddrinfo(host, nil, &hints, &list)
            guard status == 0 else { throw OutboundRefusal.unresolvable(host: host, reason: String(cString: gai_strerror(status))) }
            defer { freeaddrinfo(list) }
            var addresses: [String] = []
            var node = list
            while let current = node {
                var buffer = [CChar](repeating: 0, count: Int(NI_MAXHOST))
                if getnameinfo(current.pointee.ai_addr, current.pointee.ai_addrlen, &buffer, socklen_t(buffer.count), nil, 0, NI_NUMERICHOST) == 0 {
                    let text = String(decoding: buffer.prefix { $0 != 0 }.map(UInt8.init(bitPattern:)), as: UTF8.self)
                    if !addresses.contains(text) { addresses.append(text) }
                }
                node = current.pointee.ai_next
            }
            return addresses
        }
    }
}

/// Why a URL may not be called. `unresolvable` may pass later (DNS); the others never will.
public enum OutboundRefusal: Error, Equatable, CustomStringConvertible, CodedError {
    case notHTTP
    case credentialsInURL
    case hostNotAllowed(host: String, port: Int)
    case internalAddress(host: String, address: String)
    case unresolvable(host: String, reason: String)

    public var code: JobErrorCode { isPermanent ? .urlRefused : .httpConnectionFailed }

    public var isPermanent: Bool {
        if case .unresolvable = self { return false }
        return true
    }

    public var description: String {
        switch self {
        case .notHTTP: "not an http(s) URL with a host"
        case .credentialsInURL: "the URL carries a user or password"
        case .hostNotAllowed(let host, let port): "\(host.contains(":") ? "[\(host)]" : host):\(port) is not in FLEET_OUTBOUND_HOSTS"
        case .internalAddress(let host, let address):
            "\(host) resolves to \(address), an internal address (loopback, private, link-local or reserved); only an FLEET_OUTBOUND_HOSTS entry naming that address allows it"
        case .unresolvable(let host, let reason): "\(host) does not resolve: \(reason)"
        }
    }
}

/// An IPv4 or IPv6 address, and whether it is one the public internet routes.
struct IPAddress: Equatable {
    let bytes: [UInt8]  // 4 or 16
    /// The canonical text (inet_ntop), so `::0001` and `::1` compare equal.
    let text: String

    init?(_ text: String) {
        var v4 = in_addr()
        var v6 = in6_addr()
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        if inet_pton(AF_INET, text, &v4) == 1 {
            bytes = withUnsafeBytes(of: &v4) { Array($0) }
            _ = inet_ntop(AF_INET, &v4, &buffer, socklen_t(buffer.count))
        } else if inet_pton(AF_INET6, text, &v6) == 1 {
            bytes = withUnsafeBytes(of: &v6) { Array($0) }
            _ = inet_ntop(AF_INET6, &v6, &buffer, socklen_t(buffer.count))
        } else {
            return nil
        }
        self.text = String(decoding: buffer.prefix { $0 != 0 }.map(UInt8.init(bitPattern:)), as: UTF8.self)
    }

    var isPublic: Bool { bytes.count == 4 ? Self.isPublicV4(bytes) : Self.isPublicV6(bytes) }

    private static func isPublicV4(_ b: [UInt8]) -> Bool {
        switch (b[0], b[1]) {
        case (0, _), (10, _), (127, _): false                 // this network, private, loopback
        case (100, 64...127): false                           // carrier-grade NAT
        case (169, 254): false                                // link-local: the cloud metadata service
        case (172, 16...31), (192, 168): false                // private
        case (192, 0) where b[2] == 0 || b[2] == 2: false     // IETF protocol assignments, documentation
        case (198, 18...19): false                            // benchmarking
        case (198, 51) where b[2] == 100, (203, 0) where b[2] == 113: false  // documentation
        case (224...255, _): false                            // multicast, reserved, broadcast
        default: true
        }
    }

    private static func isPublicV6(_ b: [UInt8]) -> Bool {
        let zeroPrefix = b[0..<10].allSatisfy { $0 == 0 }
        if zeroPrefix && b[10] == 0xff && b[11] == 0xff { return isPublicV4(Array(b[12...])) }  // ::ffff:a.b.c.d
        if b[0..<12].allSatisfy({ $0 == 0 }) { return false }                                   // ::, ::1, ::a.b.c.d
        if b[0] == 0x00, b[1] == 0x64, b[2] == 0xff, b[3] == 0x9b, b[4..<12].allSatisfy({ $0 == 0 }) {
            return isPublicV4(Array(b[12...]))                                                  // NAT64 64:ff9b::/96
        }
        if b[0] & 0xfe == 0xfc { return false }                   // unique local fc00::/7 (fd00:ec2::254, AWS metadata)
        if b[0] == 0xfe && b[1] & 0xc0 == 0x80 { return false }   // link-local fe80::/10
        if b[0] == 0xff { return false }                          // multicast
        if b[0] == 0x20, b[1] == 0x01, b[2] == 0x0d, b[3] == 0xb8 { return false }  // documentation
        return true
    }
}
