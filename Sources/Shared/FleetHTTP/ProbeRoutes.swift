import Hummingbird

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
