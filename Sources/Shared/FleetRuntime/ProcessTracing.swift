import FleetHTTPClient
import FleetTracing
import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import Tracing

/// The process's traces (`docs/operations.md`, "Traces"): on when `OTEL_EXPORTER_OTLP_ENDPOINT`
/// is set, then `FleetTracer` records them and `OTLPExporter` sends them, configured by the
/// standard `OTEL_*` variables; off otherwise, when the no-op tracer costs next to nothing.
enum ProcessTracing {
    /// The exporter once `bootstrap` turned tracing on; `FleetProcess.run` runs it in the
    /// process's group, first, so it stops last and sends the spans of the drain.
    private static let exporter = Mutex<OTLPExporter?>(nil)

    /// Installs the fleet's tracer when `environment` turns tracing on. The service is named after
    /// the executable (`dispatcher`, `render-worker`…) unless `OTEL_SERVICE_NAME` says otherwise.
    static func bootstrap(_ environment: [String: String]) throws {
        guard let configuration = try TracingConfiguration(environment: environment, defaultServiceName: ProcessInfo.processInfo.processName)
        else { return }
        var logger = Logger(label: "otel")
        logger.logLevel = configuration.logLevel
        // Header values stay out: they hold the collector's API keys.
        logger.info("tracing on", metadata: [
            "url": "\(HTTPClientError.redacted(configuration.tracesURL))", "protocol": "\(configuration.format.rawValue)",
            "headers": "\(configuration.headers.map(\.name))", "resource": "\(configuration.resource.map { "\($0.key)=\($0.value)" })",
            "sampler_ratio": "\(configuration.ratio)", "schedule_delay": "\(configuration.scheduleDelay)",
            "max_queue_size": "\(configuration.maxQueueSize)", "max_export_batch_size": "\(configuration.maxExportBatchSize)",
            "timeout": "\(configuration.timeout)",
        ])
        let buffer = SpanBuffer(capacity: configuration.maxQueueSize, batchSize: configuration.maxExportBatchSize)
        InstrumentationSystem.bootstrap(FleetTracer(ratio: configuration.ratio, buffer: buffer))
        exporter.withLock {
            $0 = OTLPExporter(configuration: configuration, buffer: buffer, client: CurlHTTPClient(), logger: logger)
        }
    }

    /// The exporter's service, taken once by the process's run; nil when tracing is off.
    static func takeExporter() -> OTLPExporter? {
        exporter.withLock { exporter in
            defer { exporter = nil }
            return exporter
        }
    }
}
