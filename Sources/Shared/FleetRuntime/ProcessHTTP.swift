import FleetHTTP
import FleetPostgres
import Logging
import Prometheus
import ServiceLifecycle

/// An executable's HTTP side on `FLEET_HTTP_ADDRESS`: `/healthz`, `/readyz` (started, database
/// answers, not draining, and the executable's own `checks`: a worker's store taking writes, its
/// bucket reachable), `/metrics`, and whatever routes the executable adds (the dispatcher's webhooks).
public struct ProcessHTTP: Sendable {
    public let listener: HTTPListener
    public let started: StartupSignal
    public let drain: DrainSignal

    public init(
        address: ListenAddress, limits: HTTPListenerLimits = HTTPListenerLimits(), pool: PostgresPool,
        registry: PrometheusCollectorRegistry, routes: [any HTTPRoutes] = [], checks: [any ReadinessCheck] = [], logger: Logger
    ) {
        let (started, drain) = (StartupSignal(), DrainSignal())
        (self.started, self.drain) = (started, drain)
        listener = HTTPListener(
            address: address, limits: limits,
            routes: [ProbeRoutes(checks: [started, drain, DatabaseReadiness(pool: pool)] + checks), MetricsRoutes(registry: registry)] + routes,
            logger: logger)
    }

    /// `services` with the listener first (it stops last, answering probes while the others
    /// drain) and the drain signal last (it is raised first).
    public func around(_ services: [any Service]) -> [any Service] {
        [listener] + services + [drain.sentinel]
    }
}
