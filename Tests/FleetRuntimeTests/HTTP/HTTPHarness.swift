import DispatcherCore
import FleetHTTP
import FleetHTTPClient
import FleetPostgres
import FleetRuntime
@testable import FleetTestSupport
import Foundation
import Logging
@testable import Providers
@testable import Renders
import ServiceLifecycle
import Synchronization

/// The dispatcher's HTTP side in this process, assembled as `dispatcher run` does (probes,
/// metrics, webhook routes around the given services) on a kernel-chosen loopback port.
struct DispatcherHTTPHarness {
    let client = CurlHTTPClient()
    let base: String
    let port: Int
    let group: ServiceGroup
    let running: Task<Void, any Error>

    /// Runs `body` with the listener up, then shuts the group down gracefully.
    static func with(
        databaseURL: String, webhooks: WebhookSettings = WebhookSettings(), services: [any Service] = [],
        limits: HTTPListenerLimits = HTTPListenerLimits(), _ body: (DispatcherHTTPHarness) async throws -> Void
    ) async throws {
        _ = TestMetricsOnce.shared
        let pool = PostgresPool(conninfo: databaseURL, maxConnections: 4)
        let client = CurlHTTPClient()
        let routes = WebhookRoutes(settings: webhooks, http: client, store: RenderStore(pool: pool), logger: testLogger)
        let http = ProcessHTTP(
            address: ListenAddress(host: "127.0.0.1", port: 0), limits: limits, pool: pool, registry: TestMetricsOnce.registry,
            routes: [routes], logger: testLogger)
        // The given services need no start-up (`FleetProcess.run` marks this after migrations).
        http.started.markStarted()
        let group = ServiceGroup(configuration: .init(services: http.around(services).map { .init(service: $0) }, logger: testLogger))
        let running = Task { try await group.run() }
        guard let port = await http.listener.boundPort() else {
            running.cancel()
            throw TestFailure("the HTTP listener did not start: \(String(describing: await running.result))")
        }
        let harness = DispatcherHTTPHarness(base: "http://127.0.0.1:\(port)", port: port, group: group, running: running)
        do {
            try await body(harness)
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }

    func stop() async {
        await group.triggerGracefulShutdown()
        _ = await running.result
    }

    func get(_ path: String) async throws -> HTTPClientResponse {
        try await client.execute(HTTPClientRequest(url: base + path, timeout: .seconds(10)))
    }

    func post(_ path: String, body: Data, headers: [String: String]) async throws -> HTTPClientResponse {
        try await client.execute(.json(.post, url: base + path, body: body, headers: headers.map { ($0.key, $0.value) }, timeout: .seconds(15)))
    }
}

/// Everything announced on `fleet_render_events` while it runs.
final class RenderEventLog: Sendable {
    private let listening: TestNotifier
    private let seen = Mutex((connected: false, payloads: [String]()))
    private let task: Mutex<Task<Void, Never>?> = Mutex(nil)

    init(databaseURL: String) async throws {
        listening = TestNotifier(url: databaseURL)
        let events = listening.notifier.subscribe(to: [RenderChannel.events]).events
        let collector = Task { [self] in
            for await event in events { record(event) }
        }
        task.withLock { $0 = collector }
        try await waitFor("LISTEN connected") { $0.connected }
    }

    /// The request ids announced.
    var payloads: [String] { seen.withLock { $0.payloads } }
    /// The announcements whole, with the bodies they carry.
    var announcements: [CallbackAnnouncement] { texts.withLock { $0 }.map(CallbackAnnouncement.init(text:)) }
    private let texts = Mutex([String]())

    private func record(_ event: NotifierEvent) {
        switch event {
        case .mightHaveMissed: seen.withLock { $0.connected = true }
        case .notification(_, let text):
            texts.withLock { $0.append(text) }
            seen.withLock { $0.payloads.append(CallbackAnnouncement(text: text).requestID) }
        }
    }

    /// Waits until `condition` holds over what was seen, failing after `timeout`.
    func waitFor(_ what: String, timeout: Duration = .seconds(10), _ condition: ((connected: Bool, payloads: [String])) -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        while !seen.withLock({ condition($0) }) {
            guard ContinuousClock.now < deadline else { throw TestFailure("timed out waiting for \(what); seen \(payloads)") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    func stop() {
        listening.stop()
        task.withLock { $0?.cancel() }
    }
}

/// A service that, once shutdown starts, holds the group's drain open until released.
final class DrainHold: Service, Sendable {
    private let (released, release) = AsyncStream.makeStream(of: Void.self)

    func run() async throws {
        try? await gracefulShutdown()
        for await _ in released { return }
    }

    func finish() { release.finish() }
}
