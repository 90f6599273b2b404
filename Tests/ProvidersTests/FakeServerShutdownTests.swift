import FakeProviders
import Foundation
import Hummingbird
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A test server stopped while connections are still arriving. Cancelling a Hummingbird
/// server drops the connections NIO accepted but the server had not yet taken, and NIO traps
/// on them ("Deinited NIOAsyncWriter without calling finish()"): a whole `swift test` run
/// crashed that way. A crash here ends the test process, so this test fails by not returning.
@Suite struct FakeServerShutdownTests {
    @Test func aServerStoppedUnderABurstOfConnectionsStopsWithoutATrap() async throws {
        for _ in 0..<20 {
            let router = Router()
            router.get("/") { _, _ in Response(status: .ok) }
            let server = try await FakeServer.start(router: router)
            // 64 connections that send nothing: each sits accepted, most not yet served,
            // when the stop begins.
            let sockets = (0..<64).map { _ in Self.connect(port: server.port) }
            // Accepted connections that never sent a request are closed by the graceful
            // shutdown, not waited on until the grace period's cancel.
            #expect(await server.stop() == .graceful)
            for socket in sockets where socket >= 0 { close(socket) }
            #expect(sockets.filter { $0 >= 0 }.count > 0)
        }
    }

    /// A request told to hang (`FakeServer.pause`) ends when its server stops: the graceful
    /// stop waits for it, and cancelling instead is what traps, so a hanging fake must not hold
    /// the stop for its grace period (30 s) or its hang (10 minutes).
    @Test func aRequestHangingInPauseEndsWhenItsServerStops() async throws {
        let entered = AsyncStream.makeStream(of: Void.self)
        let router = Router()
        router.get("/hang") { _, _ in
            entered.continuation.yield()
            try await FakeServer.pause(for: .seconds(600))
            return Response(status: .ok)
        }
        let server = try await FakeServer.start(router: router)
        let socket = Self.connect(port: server.port)
        defer { close(socket) }
        let request = Array("GET /hang HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
        #expect(send(socket, request, request.count, 0) == request.count)
        var waiting = entered.stream.makeAsyncIterator()
        _ = await waiting.next()
        #expect(await server.stop() == .graceful)
    }

    /// A blocking connect on loopback: it returns once the kernel has queued the connection.
    private static func connect(port: Int) -> Int32 {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { return -1 }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            close(descriptor)
            return -1
        }
        return descriptor
    }
}
