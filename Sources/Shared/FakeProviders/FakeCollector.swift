import Foundation
import Hummingbird
import Synchronization

/// An OpenTelemetry collector on loopback: takes OTLP/HTTP trace exports in JSON
/// (`OTEL_EXPORTER_OTLP_PROTOCOL=http/json`) at `/v1/traces` and keeps their spans, decoded.
/// Point a process's `OTEL_EXPORTER_OTLP_ENDPOINT` at `baseURL`.
public final class FakeCollector: Sendable {
    public let server: FakeServer
    private let collected: Collected

    public var baseURL: String { server.baseURL }
    public var spans: [CollectedSpan] { collected.spans.withLock { $0 } }

    private init(server: FakeServer, collected: Collected) {
        self.server = server
        self.collected = collected
    }

    public static func start() async throws -> FakeCollector {
        let collected = Collected()
        let router = Router()
        router.post("v1/traces") { request, _ -> Response in
            let export: ExportRequest
            do {
                export = try JSONDecoder().decode(ExportRequest.self, from: try await FakeHTTP.body(request))
            } catch {
                return FakeHTTP.json(400, ["error": "not an OTLP/JSON trace export: \(error)"])
            }
            collected.spans.withLock { $0 += export.spans }
            // An empty ExportTraceServiceResponse: everything accepted.
            return FakeHTTP.json(200, [:])
        }
        let server = try await FakeServer.start(router: router)
        return FakeCollector(server: server, collected: collected)
    }

    public func stop() async { await server.stop() }

    /// The spans collected so far, once `condition` holds of them, or nil after `timeout`.
    public func spans(within timeout: Duration, until condition: ([CollectedSpan]) -> Bool) async throws -> [CollectedSpan]? {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let spans = self.spans
            if condition(spans) { return spans }
            try await Task.sleep(for: .milliseconds(100))
        }
        return nil
    }

    private final class Collected: Sendable {
        let spans = Mutex<[CollectedSpan]>([])
    }
}

/// One exported span, as the test reads it: ids in lowercase hex, times in nanoseconds since
/// 1970, attribute values as text.
public struct CollectedSpan: Sendable, Equatable {
    public let service: String
    public let name: String
    public let traceID: String
    public let spanID: String
    public let parentSpanID: String?
    public let start: UInt64
    public let end: UInt64
    public let attributes: [String: String]
}

// The OTLP/JSON shapes (opentelemetry-proto's JSON mapping), only the fields read here.
private struct ExportRequest: Decodable {
    let resourceSpans: [ResourceSpans]?

    var spans: [CollectedSpan] {
        (resourceSpans ?? []).flatMap { resource in
            let service = resource.resource?.attributes?.first { $0.key == "service.name" }?.value.text ?? ""
            return (resource.scopeSpans ?? []).flatMap { $0.spans ?? [] }.map { span in
                CollectedSpan(
                    service: service, name: span.name, traceID: hexID(span.traceId), spanID: hexID(span.spanId),
                    parentSpanID: span.parentSpanId.flatMap { $0.isEmpty ? nil : hexID($0) },
                    start: UInt64(span.startTimeUnixNano) ?? 0, end: UInt64(span.endTimeUnixNano) ?? 0,
                    attributes: Dictionary((span.attributes ?? []).map { ($0.key, $0.value.text) }, uniquingKeysWith: { _, last in last }))
            }
        }
    }

    struct ResourceSpans: Decodable {
        let resource: Resource?
        let scopeSpans: [ScopeSpans]?
    }

    struct Resource: Decodable {
        let attributes: [KeyValue]?
    }

    struct ScopeSpans: Decodable {
        let spans: [Span]?
    }

    struct Span: Decodable {
        let traceId: String
        let spanId: String
        let parentSpanId: String?
        let name: String
        let startTimeUnixNano: String
        let endTimeUnixNano: String
        let attributes: [KeyValue]?
    }

    struct KeyValue: Decodable {
        let key: String
        let value: AnyValue
    }

    /// One of the value's fields is set; 64-bit integers come as strings.
    struct AnyValue: Decodable {
        let stringValue: String?
        let intValue: String?
        let boolValue: Bool?
        let doubleValue: Double?

        var text: String { stringValue ?? intValue ?? boolValue.map(String.init) ?? doubleValue.map { "\($0)" } ?? "" }
    }
}

/// OTLP/JSON's ids are hex (its one departure from protobuf's JSON mapping, which would write
/// bytes as base64); lowercase here whatever case was sent.
private func hexID(_ text: String) -> String { text.lowercased() }
