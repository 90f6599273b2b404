import Foundation
import Hummingbird
import NIOCore
import ServiceLifecycle
import Synchronization

/// One condition `/readyz` requires; nil when met, else the reason it is not.
public protocol ReadinessCheck: Sendable {
    func unreadyReason() async -> String?
}

/// `GET /healthz`: the process answers (200). `GET /readyz`: 200 when every check passes,
/// else 503 with `{"ready":false,"reason":…}` naming the first that failed.
public struct ProbeRoutes: HTTPRoutes {
    let checks: [any ReadinessCheck]

    public init(checks: [any ReadinessCheck]) { self.checks = checks }

    public func register(on router: Router<BasicRequestContext>) {
        router.get("/healthz") { _, _ in JSONResponse.make(.ok, ["alive": true]) }
        router.get("/readyz") { _, _ in
            for check in checks {
                if let reason = await check.unreadyReason() { return JSONResponse.make(.serviceUnavailable, ["ready": false, "reason": reason]) }
            }
            return JSONResponse.make(.ok, ["ready": true])
        }
    }
}

/// A small JSON answer (`{"ready":true}`, `{"error":"…"}`).
public enum JSONResponse {
    public static func make(_ status: HTTPResponse.Status, _ object: [String: any Sendable]) -> Response {
        let body = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
        return Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }
}

/// Set once graceful shutdown starts; `/readyz` then answers 503 so traffic moves elsewhere.
public final class DrainSignal: ReadinessCheck {
    private let draining = Atomic(false)

    public init() {}

    public var isDraining: Bool { draining.load(ordering: .acquiring) }

    public func unreadyReason() async -> String? { isDraining ? "draining: graceful shutdown in progress" : nil }

    /// The service that raises the signal. Put it last in the ServiceGroup: services stop in
    /// reverse order, so it is the first to learn of the shutdown, before anything drains.
    public var sentinel: any Service { Sentinel(signal: self) }

    private struct Sentinel: Service {
        let signal: DrainSignal

        func run() async throws {
            try? await gracefulShutdown()
            signal.draining.store(true, ordering: .releasing)
        }
    }
}
