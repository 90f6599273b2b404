import FleetHTTP
import Metrics
import MetricsTestKit
import Prometheus

/// swift-metrics takes one backend per process: the tests share this one, which feeds both
/// MetricsTestKit (for assertions on values) and a Prometheus registry as `FleetProcess` sets
/// up (for `/metrics` over HTTP). Metric handles made before the first use go nowhere.
enum TestMetricsOnce {
    static let registry = PrometheusCollectorRegistry()

    static let shared: TestMetrics = {
        let metrics = TestMetrics()
        MetricsSystem.bootstrap(MultiplexMetricsHandler(factories: [metrics, FleetMetrics.factory(registry: registry)]))
        return metrics
    }()
}
