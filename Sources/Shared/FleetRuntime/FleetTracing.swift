import FleetSupport
import Foundation
import Logging
import OTel
import ServiceLifecycle
import Synchronization
import Tracing

/// Traces (`docs/operations.md`, "Traces"): on when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, then
/// exported over OTLP/HTTP and configured by the standard `OTEL_*` variables (service name,
/// sampler, batch delay); off otherwise, when the no-op tracer costs next to nothing.
public enum FleetTracing {
    /// The exporter's service once `bootstrap` turned tracing on; `FleetProcess.run` runs it in
    /// the process's group, first, so it stops last and sends the spans of the drain.
    private static let exporter = Mutex<(any Service)?>(nil)

    /// An endpoint turns it on; `OTEL_SDK_DISABLED=true` keeps it off all the same (swift-otel
    /// refuses to build a tracer it disables).
    static func isEnabled(_ environment: [String: String]) -> Bool {
        !(environment["OTEL_EXPORTER_OTLP_ENDPOINT"] ?? "").isEmpty && environment["OTEL_SDK_DISABLED"]?.lowercased() != "true"
    }

    /// Log lines inside a span carry its `trace_id` and `span_id` (and `trace_flags`).
    static let logMetadata = OTel.makeLoggingMetadataProvider()

    /// Installs the OTel tracer when `environment` turns tracing on. The service is named after
    /// the executable (`dispatcher`, `render-worker`…) unless `OTEL_SERVICE_NAME` says otherwise.
    static func bootstrap(_ environment: [String: String]) throws {
        guard isEnabled(environment) else { return }
        var configuration = OTel.Configuration.default
        configuration.serviceName = ProcessInfo.processInfo.processName
        configuration.logs.enabled = false
        configuration.metrics.enabled = false
        // The exporter's own complaints (a collector down) go to the process's JSON log; its
        // start-up account of each variable it read stays out (OTEL_LOG_LEVEL=info shows it).
        configuration.diagnosticLogger = .custom(Logger(label: "otel"))
        configuration.diagnosticLogLevel = .warning
        let backend: (factory: any Tracer, service: any Service)
        do {
            backend = try OTel.makeTracingBackend(configuration: configuration)
        } catch {
            throw ConfigurationError(variable: "OTEL_EXPORTER_OTLP_ENDPOINT", reason: "traces cannot be exported as configured: \(error)")
        }
        InstrumentationSystem.bootstrap(backend.factory)
        exporter.withLock { $0 = backend.service }
    }

    /// The exporter's service, taken once by the process's run; nil when tracing is off.
    static func takeExporter() -> (any Service)? {
        exporter.withLock { exporter in
            defer { exporter = nil }
            return exporter
        }
    }
}
