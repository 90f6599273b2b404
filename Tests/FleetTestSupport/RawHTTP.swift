import FleetSupport
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// One HTTP/1.1 exchange over a plain socket, nothing followed or merged: the tests read every
/// header line as it reached the wire (each `Set-Cookie`, a 303's `Location`).
struct RawHTTPResponse {
    let status: Int
    let headers: [(name: String, value: String)]
    let body: String

    func header(_ name: String) -> String? { headers.first { $0.name.lowercased() == name.lowercased() }?.value }
    func all(_ name: String) -> [String] { headers.filter { $0.name.lowercased() == name.lowercased() }.map(\.value) }

    /// The value a `Set-Cookie` gives `name`, with the cookie's whole line.
    func cookie(_ name: String) -> (value: String, line: String)? {
        for line in all("Set-Cookie") where line.hasPrefix("\(name)=") {
            let value = line.dropFirst(name.count + 1).prefix { $0 != ";" }
            return (String(value), line)
        }
        return nil
    }
}

enum RawHTTP {
    /// The exchange runs on `blockingIO`: its reads block, and must hold neither one of the
    /// cooperative pool's threads (two on this machine) nor the default queue's, one per core,
    /// which the server and other suites (libvips) need.
    static func send(port: Int, _ method: String, _ path: String, cookies: [String: String] = [:], form: [String: String]? = nil,
                     headers: [String: String] = [:]) async throws -> RawHTTPResponse {
        try await offload(on: blockingIO) { try exchange(port: port, method, path, cookies: cookies, form: form, headers: headers) }
    }

    private static func exchange(port: Int, _ method: String, _ path: String, cookies: [String: String], form: [String: String]?,
                                 headers: [String: String]) throws -> RawHTTPResponse {
        var lines = ["\(method) \(path) HTTP/1.1", "Host: 127.0.0.1:\(port)", "Connection: close"]
        if !cookies.isEmpty { lines.append("Cookie: " + cookies.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: "; ")) }
        for (name, value) in headers { lines.append("\(name): \(value)") }
        var body = ""
        if let form {
            var allowed = CharacterSet.alphanumerics
            allowed.insert(charactersIn: "-._~")
            body = form.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value.addingPercentEncoding(withAllowedCharacters: allowed)!)" }.joined(separator: "&")
            lines.append("Content-Type: application/x-www-form-urlencoded")
        }
        if method == "POST" { lines.append("Content-Length: \(body.utf8.count)") }
        let request = lines.joined(separator: "\r\n") + "\r\n\r\n" + body

        let fd = try connectToLoopback(port: port) { fd in
            var timeout = timeval(tv_sec: 60, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        }
        defer { close(fd) }
        try writeAll(fd, Array(request.utf8))
        var received = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n <= 0 { break }
            received += buffer[0..<n]
        }
        let text = String(decoding: received, as: UTF8.self)
        guard let split = text.range(of: "\r\n\r\n") else { throw TestFailure("no HTTP response: \(text.prefix(200))") }
        let head = text[..<split.lowerBound].components(separatedBy: "\r\n")
        guard let statusLine = head.first, let status = Int(statusLine.split(separator: " ")[1]) else { throw TestFailure("bad status line") }
        let headers = head.dropFirst().compactMap { line -> (String, String)? in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        }
        return RawHTTPResponse(status: status, headers: headers, body: String(text[split.upperBound...]))
    }
}

/// A blocking TCP socket connected to 127.0.0.1:`port`, `configure`d before it connects.
func connectToLoopback(port: Int, configure: (Int32) -> Void = { _ in }) throws -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw TestFailure("socket() failed") }
    configure(fd)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard connected == 0 else {
        close(fd)
        throw TestFailure("connect to 127.0.0.1:\(port) failed")
    }
    return fd
}

/// Writes every byte, or throws.
func writeAll(_ fd: Int32, _ bytes: [UInt8]) throws {
    var sent = 0
    while sent < bytes.count {
        let n = bytes[sent...].withUnsafeBufferPointer { write(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { throw TestFailure("write failed") }
        sent += n
    }
}
