import CoreMetrics
import Hummingbird
import NIOCore
import Prometheus

/// `GET /metrics`: the registry in Prometheus's text format.
public struct MetricsRoutes: HTTPRoutes {
    let registry: PrometheusCollectorRegistry

    public init(registry: PrometheusCollectorRegistry) { self.registry = registry }

    public func register(on router: Router<BasicRequestContext>) {
        router.get("/metrics") { _, _ in
            Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                     body: .init(byteBuffer: ByteBuffer(bytes: registry.emitToBuffer())))
        }
    }
}

/// The process's metrics: swift-metrics handles (`Counter`, `Timer`…) land in one Prometheus
/// registry, which `/metrics` serves.
public enum FleetMetrics {
    /// The process's registry; the metrics system is global, so its registry is too.
    public static let registry = PrometheusCollectorRegistry()

    /// Timers become histograms in seconds. Buckets reach past the 30 s render deadline and
    /// the 25 s drain, so a slow provider or job shows where it sits instead of in +Inf.
    public static let durationBuckets: [Duration] = [
        .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100),
        .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5),
        .seconds(10), .seconds(20), .seconds(30), .seconds(60), .seconds(120),
    ]

    public static func factory(registry: PrometheusCollectorRegistry) -> PrometheusMetricsFactory {
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.defaultDurationHistogramBuckets = durationBuckets
        return factory
    }

    /// Bootstraps the metrics system with `registry`, once per process (later calls do nothing).
    public static func bootstrap() { _ = bootstrapped }

    private static let bootstrapped: Void = MetricsSystem.bootstrap(factory(registry: registry))
}
