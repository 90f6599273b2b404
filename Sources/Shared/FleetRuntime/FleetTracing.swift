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
        // New traces are sampled by the fleet's tracer, before swift-otel is asked; swift-otel
        // records what it is given and follows parents. It reads the sampler from the process's
        // environment over its configuration, so the two variables are out of the environment
        // while it is built (at start-up, before any other thread).
        let sampler = RootSampler(ratio: try rootRatio(environment))
        configuration.traces.sampler = .parentBasedAlwaysOn
        let saved = samplerVariables.map { ($0, ProcessInfo.processInfo.environment[$0]) }
        for (name, _) in saved { unsetenv(name) }
        defer { for case let (name, value?) in saved { setenv(name, value, 1) } }
        do {
            let backend = try OTel.makeTracingBackend(configuration: configuration)
            InstrumentationSystem.bootstrap(RootSampledTracer(backend.factory, sampler: sampler))
            exporter.withLock { $0 = backend.service }
        } catch {
            throw ConfigurationError(variable: "OTEL_EXPORTER_OTLP_ENDPOINT", reason: "traces cannot be exported as configured: \(error)")
        }
    }

    private static let samplerVariables = ["OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"]

    /// The share of new traces kept, from the standard variables (`docs/configuration.md`): the
    /// `always_on` samplers (the default) keep every one, the `always_off` ones none, the
    /// `traceidratio` ones `OTEL_TRACES_SAMPLER_ARG` (default 1). A span with a parent follows
    /// the parent's decision whichever is named.
    static func rootRatio(_ environment: [String: String]) throws -> Double {
        let name = environment["OTEL_TRACES_SAMPLER"].map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
        switch name {
        case "", "always_on", "parentbased_always_on":
            return 1
        case "always_off", "parentbased_always_off":
            return 0
        case "traceidratio", "parentbased_traceidratio":
            guard let argument = environment["OTEL_TRACES_SAMPLER_ARG"], !argument.isEmpty else { return 1 }
            guard let ratio = Double(argument), (0...1).contains(ratio) else {
                throw ConfigurationError(variable: "OTEL_TRACES_SAMPLER_ARG", reason: "a ratio from 0 to 1, not '\(argument.prefix(32))'")
            }
            return ratio
        default:
            throw ConfigurationError(variable: "OTEL_TRACES_SAMPLER", reason: "one of always_on, always_off, traceidratio and their parentbased_ forms, not '\(name.prefix(64))'")
        }
    }

    /// The exporter's service, taken once by the process's run; nil when tracing is off.
    static func takeExporter() -> (any Service)? {
        exporter.withLock { exporter in
            defer { exporter = nil }
            return exporter
        }
    }
}
