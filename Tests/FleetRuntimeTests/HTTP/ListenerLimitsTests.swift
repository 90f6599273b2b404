import FleetHTTP
import FleetSupport
@testable import FleetTestSupport
import Foundation
import Glibc
import Testing

/// The HTTP listener (probes, metrics, webhooks) against clients that hold connections:
/// half-sent and idle connections are closed, and a connection beyond the cap is closed.
@Suite struct ListenerLimitsTests {
    /// A cap the idle tests never reach: a connection the server just closed still holds its
    /// slot for a moment after the client saw the close, and these tests open the next at once.
    static let limits = HTTPListenerLimits(idleTimeout: .seconds(1), maxConnections: 8)

    /// How long a test waits for a close before it fails: a guard against a close that never
    /// comes (no idle timeout), not a bound on when it comes.
    static let closeGuard = Duration.seconds(120)

    @Test func aHalfSentRequestAndAnIdleConnectionAreClosed() async throws {
        let q = try await TestQueue.make()
        try await DispatcherHTTPHarness.with(databaseURL: q.url, limits: Self.limits) { http in
            let halfSent = try RawSocket(port: http.port)
            try halfSent.send("GET /healthz HTTP/1.1\r\nHost: fleet\r\nX-Slow: ")
            let idle = try RawSocket(port: http.port)
            // Closed by the 1 s idle timeout (without one, never).
            #expect(await halfSent.readUntilClosed(within: Self.closeGuard).closed)
            #expect(await idle.readUntilClosed(within: Self.closeGuard).closed)
            // A kept-alive connection is answered, then closed once idle.
            let keptAlive = try RawSocket(port: http.port)
            try keptAlive.send("GET /healthz HTTP/1.1\r\nHost: fleet\r\n\r\n")
            let answer = await keptAlive.readUntilClosed(within: Self.closeGuard)
            #expect(answer.text.hasPrefix("HTTP/1.1 200") && answer.closed, "closed: \(answer.closed), answer: \(answer.text.prefix(300))")
            for socket in [halfSent, idle, keptAlive] { socket.close() }
        }
    }

    /// A child process started while a connection is open (the tests start fleet processes all
    /// the time, fleet-drill in production) does not keep that connection open: without it
    /// holding a copy of the accepted socket, the idle close reaches the client.
    @Test func aConnectionOpenWhileAChildStartsIsClosedAllTheSame() async throws {
        let q = try await TestQueue.make()
        try await DispatcherHTTPHarness.with(databaseURL: q.url, limits: Self.limits) { http in
            let client = try RawSocket(port: http.port)
            try client.send("GET /healthz HTTP/1.1\r\nHost: fleet\r\n\r\n")
            // Answered: the server has accepted the connection.
            #expect(await client.readAvailable(within: Self.closeGuard).hasPrefix("HTTP/1.1 200"))
            let child = try ChildProcess("/bin/sleep", ["600"], environment: [:])
            defer { child.signal(SIGKILL) }
            #expect(await client.readUntilClosed(within: Self.closeGuard).closed)
            client.close()
        }
    }

    /// Bytes of a header do not count as activity until the header is whole, so a client cannot
    /// hold a connection by trickling one: it is cut off one idle timeout after it connected.
    @Test func aHeaderSentAByteAtATimeIsCutOff() async throws {
        let q = try await TestQueue.make()
        try await DispatcherHTTPHarness.with(databaseURL: q.url, limits: Self.limits) { http in
            let trickle = try RawSocket(port: http.port)
            let header = Array("GET /healthz HTTP/1.1\r\nHost: fleet\r\nX-Slow: " + String(repeating: "a", count: 400))
            var sent = 0
            // A byte every 100 ms (a slow client): 45 s for the whole header. A send fails once the
            // server closed.
            while sent < header.count, (try? trickle.send(String(header[sent]))) != nil {
                sent += 1
                try await Task.sleep(for: .milliseconds(100))
            }
            // Cut off before the header was whole (one idle timeout, 1 s, after connecting): counted
            // in bytes, which a loaded machine slows on both sides alike.
            #expect(sent < header.count, "\(sent) of \(header.count) bytes sent")
            trickle.close()
        }
    }

    @Test func aConnectionBeyondTheCapIsClosedAndTheNextServedOnceOneCloses() async throws {
        let q = try await TestQueue.make()
        let limits = HTTPListenerLimits(idleTimeout: .seconds(20), maxConnections: 2)
        try await DispatcherHTTPHarness.with(databaseURL: q.url, limits: limits) { http in
            let holders = try (0..<2).map { _ in try RawSocket(port: http.port) }
            for holder in holders { try holder.send("GET /healthz HTTP/1.1\r\nHost: fleet\r\n\r\n") }
            for holder in holders { #expect(await holder.readAvailable(within: Self.closeGuard).hasPrefix("HTTP/1.1 200")) }
            let third = try RawSocket(port: http.port)
            let refused = await third.readUntilClosed(within: Self.closeGuard)
            #expect(refused.closed && refused.text.isEmpty)
            // Once a slot is free (the listener sees the close), a new connection is served.
            holders[0].close()
            try await waitFor("a new connection served") {
                let next = try RawSocket(port: http.port)
                defer { next.close() }
                try next.send("GET /healthz HTTP/1.1\r\nHost: fleet\r\n\r\n")
                return await next.readAvailable(within: Self.closeGuard).hasPrefix("HTTP/1.1 200")
            }
            for socket in holders + [third] { socket.close() }
        }
    }
}

/// A loopback TCP client for clients that misbehave in ways an HTTP library will not. Its
/// waits block a thread of their own (`blockingIO`), never the cooperative pool the server
/// under test runs on.
final class RawSocket: @unchecked Sendable {
    private var descriptor: Int32

    init(port: Int) throws {
        descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw TestFailure("connect: \(String(cString: strerror(errno)))") }
    }

    deinit { close() }

    func send(_ text: String) throws {
        let bytes = Array(text.utf8)
        guard Glibc.send(descriptor, bytes, bytes.count, Int32(MSG_NOSIGNAL)) == bytes.count else { throw TestFailure("send failed") }
    }

    /// What arrives until the peer closes (or resets), or `within` passes.
    func readUntilClosed(within limit: Duration) async -> (text: String, closed: Bool) {
        (try? await offload(on: blockingIO) { self.blockingReadUntilClosed(within: limit) }) ?? ("", false)
    }

    /// What arrives within `limit`, stopping at the first pause once something came.
    func readAvailable(within limit: Duration) async -> String {
        (try? await offload(on: blockingIO) { self.blockingReadAvailable(within: limit) }) ?? ""
    }

    private func blockingReadUntilClosed(within limit: Duration) -> (text: String, closed: Bool) {
        var received: [UInt8] = []
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            guard let chunk = read(until: deadline) else { return (String(decoding: received, as: UTF8.self), true) }
            received += chunk
        }
        return (String(decoding: received, as: UTF8.self), false)
    }

    private func blockingReadAvailable(within limit: Duration) -> String {
        let deadline = ContinuousClock.now + limit
        guard let first = read(until: deadline) else { return "" }
        return String(decoding: first, as: UTF8.self)
    }

    /// One read: bytes, [] when nothing came by `deadline`, nil when the peer closed.
    private func read(until deadline: ContinuousClock.Instant) -> [UInt8]? {
        var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        let left = max(0, Int32((deadline - ContinuousClock.now).seconds * 1000))
        guard poll(&poller, 1, left) > 0 else { return [] }
        var buffer = [UInt8](repeating: 0, count: 65536)
        let count = recv(descriptor, &buffer, buffer.count, 0)
        return count > 0 ? Array(buffer[..<count]) : nil
    }

    func close() {
        if descriptor >= 0 { Glibc.close(descriptor) }
        descriptor = -1
    }
}
