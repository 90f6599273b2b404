import FakeProviders
import FleetHTTPClient
@testable import FleetTestSupport
import Foundation
import Hummingbird
import Synchronization
import Testing

/// The libcurl client against a real HTTP server on loopback.
@Suite struct CurlHTTPClientTests {
    /// Counts requests in flight and the peak, and which client ports were seen.
    final class Observed: Sendable {
        let state = Mutex((inFlight: 0, peak: 0, ports: [Int]()))
        func enter(port: Int?) { state.withLock { $0.inFlight += 1; $0.peak = max($0.peak, $0.inFlight); $0.ports.append(port ?? -1) } }
        func leave() { state.withLock { $0.inFlight -= 1 } }
    }

    static func server(_ observed: Observed) async throws -> FakeServer {
        let router = Router(context: PeerRequestContext.self)
        router.get("/json") { _, context in
            observed.enter(port: context.remoteAddress?.port)
            defer { observed.leave() }
            return Response(status: .ok, headers: [.contentType: "application/json", .init("X-Reply")!: "yes"],
                            body: .init(byteBuffer: ByteBuffer(string: #"{"ok":true}"#)))
        }
        router.post("/echo") { request, _ in
            let body = try await request.body.collect(upTo: 1 << 20)
            let method = request.method.rawValue
            let header = request.headers[.init("X-Test")!] ?? ""
            var headers = HTTPFields()
            headers[.init("X-Method")!] = method
            headers[.init("X-Seen")!] = header
            return Response(status: .created, headers: headers, body: .init(byteBuffer: body))
        }
        router.put("/echo") { request, _ in
            Response(status: .accepted, body: .init(byteBuffer: try await request.body.collect(upTo: 1 << 20)))
        }
        router.get("/slow") { _, _ in
            observed.enter(port: nil)
            defer { observed.leave() }
            try await Task.sleep(for: .seconds(1))
            return Response(status: .ok)
        }
        // Holds each request until `n` are held at once (or 20 s pass): only a client that
        // keeps them all open concurrently gets quick answers.
        router.get("/gather/:n") { _, context in
            let target = Int(context.parameters.get("n") ?? "") ?? 1
            observed.enter(port: nil)
            defer { observed.leave() }
            let deadline = ContinuousClock.now + .seconds(20)
            while observed.state.withLock({ $0.peak }) < target && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            return Response(status: .ok)
        }
        router.get("/big") { _, _ in
            Response(status: .ok, body: .init(byteBuffer: ByteBuffer(repeating: 0x61, count: 2 << 20)))
        }
        router.get("/status/:code") { _, context in
            let code = Int(context.parameters.get("code") ?? "") ?? 500
            return Response(status: .init(code: code), body: .init(byteBuffer: ByteBuffer(string: "failed \(code)")))
        }
        router.get("/redirect") { _, _ in
            Response(status: .found, headers: [.location: "/json"])
        }
        return try await FakeServer.start(router: router)
    }

    @Test func getsPostsAndPutsWithHeadersAndBodies() async throws {
        let observed = Observed()
        let server = try await Self.server(observed)
        defer { Task { await server.stop() } }
        let client = CurlHTTPClient()

        let json = try await client.execute(HTTPClientRequest(url: server.baseURL + "/json"))
        #expect(json.status == 200 && json.isSuccess)
        #expect(String(decoding: json.body, as: UTF8.self) == #"{"ok":true}"#)
        #expect(json.headers["x-reply"] == "yes" && json.headers["content-type"] == "application/json")

        let payload = Data((0..<300_000).map { UInt8($0 % 251) })
        let posted = try await client.execute(HTTPClientRequest(
            method: .post, url: server.baseURL + "/echo", headers: [("X-Test", "given")], body: payload))
        #expect(posted.status == 201 && posted.body == payload)
        #expect(posted.headers["x-method"] == "POST" && posted.headers["x-seen"] == "given")

        let put = try await client.execute(HTTPClientRequest(method: .put, url: server.baseURL + "/echo", body: Data("x".utf8)))
        #expect(put.status == 202 && put.body == Data("x".utf8))

        let redirected = try await client.execute(HTTPClientRequest(url: server.baseURL + "/redirect"))
        #expect(redirected.status == 200 && redirected.headers["x-reply"] == "yes")
    }

    @Test func errorStatusesAreResponsesNotErrors() async throws {
        let server = try await Self.server(Observed())
        defer { Task { await server.stop() } }
        let response = try await CurlHTTPClient().execute(HTTPClientRequest(url: server.baseURL + "/status/503"))
        #expect(response.status == 503 && response.isServerError)
        #expect(String(decoding: response.body, as: UTF8.self) == "failed 503")
        let rejected = try await CurlHTTPClient().execute(HTTPClientRequest(url: server.baseURL + "/status/422"))
        #expect(rejected.status == 422 && !rejected.isServerError && !rejected.isSuccess)
    }

    @Test func sequentialRequestsReuseOneConnection() async throws {
        let observed = Observed()
        let server = try await Self.server(observed)
        defer { Task { await server.stop() } }
        let client = CurlHTTPClient()
        for _ in 0..<10 { _ = try await client.execute(HTTPClientRequest(url: server.baseURL + "/json")) }
        let ports = observed.state.withLock { $0.ports }
        #expect(ports.count == 10)
        #expect(Set(ports).count == 1, "each request opened a connection: \(ports)")
    }

    @Test func manyRequestsWaitAtOnceWithoutAThreadEach() async throws {
        let observed = Observed()
        let server = try await Self.server(observed)
        defer { Task { await server.stop() } }
        let client = CurlHTTPClient(maxConnectionsPerHost: 300)
        let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<200 {
                group.addTask { try await client.execute(HTTPClientRequest(url: server.baseURL + "/gather/200")).status }
            }
            return try await group.reduce(into: [Int]()) { $0.append($1) }
        }
        #expect(statuses.count == 200 && statuses.allSatisfy { $0 == 200 })
        // All 200 were held by the server at the same moment: one curl thread carried them.
        #expect(observed.state.withLock { $0.peak } == 200)
    }

    @Test func timeoutsSizeCapsAndRefusedConnectionsAreTypedErrors() async throws {
        let server = try await Self.server(Observed())
        defer { Task { await server.stop() } }
        let client = CurlHTTPClient()

        await #expect(throws: HTTPClientError.timedOut(url: server.baseURL + "/slow", after: .milliseconds(200))) {
            _ = try await client.execute(HTTPClientRequest(url: server.baseURL + "/slow", timeout: .milliseconds(200)))
        }
        await #expect(throws: HTTPClientError.responseTooLarge(url: server.baseURL + "/big", limit: 1 << 20)) {
            _ = try await client.execute(HTTPClientRequest(url: server.baseURL + "/big", maxResponseBytes: 1 << 20))
        }
        let closedPort = try freePort()
        do {
            _ = try await client.execute(HTTPClientRequest(url: "http://127.0.0.1:\(closedPort)/x"))
            Issue.record("a refused connection succeeded")
        } catch let error as HTTPClientError {
            guard case .connectionFailed = error else { Issue.record("unexpected \(error)"); return }
            #expect(error.isTransient)
        }
        await #expect(throws: HTTPClientError.self) {
            _ = try await client.execute(HTTPClientRequest(url: "file:///etc/passwd"))
        }
        // The client still works after every failure.
        #expect(try await client.execute(HTTPClientRequest(url: server.baseURL + "/json")).status == 200)
    }

    @Test func cancellingTheCallerEndsTheRequest() async throws {
        let observed = Observed()
        let server = try await Self.server(observed)
        defer { Task { await server.stop() } }
        let client = CurlHTTPClient()
        let task = Task { try await client.execute(HTTPClientRequest(url: server.baseURL + "/slow", timeout: .seconds(30))) }
        try await waitFor("the request at the server") { observed.state.withLock { $0.peak } >= 1 }
        task.cancel()
        await #expect(throws: HTTPClientError.cancelled(url: server.baseURL + "/slow")) { _ = try await task.value }
    }

    @Test func errorsNameNoQueryString() {
        let error = HTTPClientError.timedOut(url: "https://example.com/hook?token=s3cret", after: .seconds(1))
        #expect(!error.description.contains("s3cret"))
        #expect(error.description.contains("https://example.com/hook"))
    }
}
