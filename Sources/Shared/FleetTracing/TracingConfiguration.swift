import FleetSupport
import Foundation
import Logging

/// Traces as the standard OpenTelemetry variables configure them (`docs/configuration.md`):
/// read once at start, every bad value refused naming its variable.
public struct TracingConfiguration: Sendable {
    /// Where exports are POSTed: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`.
    public var tracesURL: String
    public var format: OTLPFormat = .protobuf
    /// `OTEL_EXPORTER_OTLP_HEADERS`, sent with each export; their values are never logged.
    public var headers: [(name: String, value: String)] = []
    public var timeout: Duration = .seconds(10)
    /// `service.name` first, then `OTEL_RESOURCE_ATTRIBUTES`'s others.
    public var resource: [(key: String, value: String)]
    /// The share of new traces kept.
    public var ratio: Double = 1
    public var scheduleDelay: Duration = .seconds(5)
    public var maxQueueSize = 2048
    public var maxExportBatchSize = 512
    /// The exporter's own log lines' level (`OTEL_LOG_LEVEL`).
    public var logLevel: Logger.Level = .warning

    public init(tracesURL: String, serviceName: String) {
        self.tracesURL = tracesURL
        resource = [("service.name", serviceName)]
    }

    /// Traces are on when the endpoint is set and `OTEL_SDK_DISABLED` is not `true`.
    public static func isEnabled(_ environment: [String: String]) -> Bool {
        !(environment["OTEL_EXPORTER_OTLP_ENDPOINT"] ?? "").isEmpty && environment["OTEL_SDK_DISABLED"]?.lowercased() != "true"
    }

    /// The configuration `environment` asks for; nil when it leaves traces off. The service is
    /// named `defaultServiceName` (the executable's) unless `OTEL_SERVICE_NAME` or a `service.name`
    /// resource attribute says otherwise.
    public init?(environment: [String: String], defaultServiceName: String) throws {
        guard Self.isEnabled(environment), let endpoint = environment["OTEL_EXPORTER_OTLP_ENDPOINT"] else { return nil }
        let reader = EnvironmentReader(environment: environment)
        let tracesEndpoint = environment["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] ?? ""
        let url = tracesEndpoint.isEmpty ? (endpoint.hasSuffix("/") ? String(endpoint.dropLast()) : endpoint) + "/v1/traces" : tracesEndpoint
        for (variable, text) in [("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint), ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", tracesEndpoint)] where !text.isEmpty {
            guard let parsed = URL(string: text), ["http", "https"].contains(parsed.scheme?.lowercased()), parsed.host != nil else {
                throw ConfigurationError(variable: variable, reason: "an http(s) URL, such as http://otel-collector:4318")
            }
        }
        let attributes = try Self.pairs("OTEL_RESOURCE_ATTRIBUTES", environment)
        let serviceName = (environment["OTEL_SERVICE_NAME"].flatMap { $0.isEmpty ? nil : $0 })
            ?? attributes.last { $0.key == "service.name" }?.value ?? defaultServiceName
        self.init(tracesURL: url, serviceName: serviceName)
        resource += attributes.filter { $0.key != "service.name" }
        guard let format = OTLPFormat(rawValue: environment["OTEL_EXPORTER_OTLP_PROTOCOL"].map { $0.isEmpty ? "http/protobuf" : $0.lowercased() } ?? "http/protobuf") else {
            throw ConfigurationError(variable: "OTEL_EXPORTER_OTLP_PROTOCOL", reason: "http/protobuf or http/json (gRPC is not built in)")
        }
        self.format = format
        headers = try Self.pairs("OTEL_EXPORTER_OTLP_HEADERS", environment).map { ($0.key, $0.value) }
        timeout = try reader.duration("OTEL_EXPORTER_OTLP_TIMEOUT", unit: .milliseconds(1), default: 10_000, range: 1...600_000)
        ratio = try Self.rootRatio(environment)
        scheduleDelay = try reader.duration("OTEL_BSP_SCHEDULE_DELAY", unit: .milliseconds(1), default: 5_000, range: 1...3_600_000)
        maxQueueSize = try reader.integer("OTEL_BSP_MAX_QUEUE_SIZE", default: 2048, range: 1...1_000_000)
        maxExportBatchSize = try reader.integer("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", default: 512, range: 1...maxQueueSize)
        logLevel = try Self.logLevel(environment)
    }

    /// The share of new traces kept: the `always_on` samplers (the default) keep every one, the
    /// `always_off` ones none, the `traceidratio` ones `OTEL_TRACES_SAMPLER_ARG` (default 1). A
    /// span with a parent follows the parent's decision whichever is named.
    public static func rootRatio(_ environment: [String: String]) throws -> Double {
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

    /// `key=value,key=value`, each side percent-decoded (the W3C baggage form the variables use).
    /// An error never quotes the text: `OTEL_EXPORTER_OTLP_HEADERS` holds API keys.
    static func pairs(_ variable: String, _ environment: [String: String]) throws -> [(key: String, value: String)] {
        guard let text = environment[variable], !text.trimmingCharacters(in: .whitespaces).isEmpty else { return [] }
        return try text.split(separator: ",").enumerated().map { index, item in
            let parts = item.split(separator: "=", maxSplits: 1)
            guard parts.count == 2,
                  let key = parts[0].trimmingCharacters(in: .whitespaces).removingPercentEncoding, !key.isEmpty,
                  let value = parts[1].trimmingCharacters(in: .whitespaces).removingPercentEncoding
            else { throw ConfigurationError(variable: variable, reason: "item \(index + 1) is not key=value (key=value,key=value, percent-encoded)") }
            return (key, value)
        }
    }

    static func logLevel(_ environment: [String: String]) throws -> Logger.Level {
        guard let text = environment["OTEL_LOG_LEVEL"]?.lowercased(), !text.isEmpty else { return .warning }
        if text == "warn" { return .warning }
        guard let level = Logger.Level(rawValue: text) else {
            throw ConfigurationError(variable: "OTEL_LOG_LEVEL", reason: "one of trace, debug, info, notice, warning, error, critical, not '\(text.prefix(32))'")
        }
        return level
    }
}
