import FakeProviders
import FleetHTTPClient
import FleetSupport
@testable import FleetTestSupport
@testable import FleetTracing
import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import Testing
import Tracing

/// The fleet's tracer and exporter on their own: ids, traceparents, the buffer, the two OTLP
/// encodings read back, the exporter's schedule and shutdown, the variables.
@Suite struct FleetTracerTests {
    private static func tracer(capacity: Int = 100, batchSize: Int = 10) -> FleetTracer {
        FleetTracer(ratio: 1, buffer: SpanBuffer(capacity: capacity, batchSize: batchSize))
    }

    /// A root span, a child with attributes, an event, a link and an error status, ended at known times.
    private static func finishedTrace(_ tracer: FleetTracer) -> (root: SpanRecord, child: SpanRecord) {
        let root = tracer.startSpan("request", context: .topLevel, ofKind: .server, at: Nanos(1_000))
        let child = tracer.startSpan("job run", context: root.context, ofKind: .consumer, at: Nanos(2_000))
        child.attributes["job.kind"] = "drill.noop"
        child.attributes["job.id"] = 42
        child.attributes["job.big"] = Int64(-5_000_000_000)
        child.attributes["ok"] = true
        child.attributes["share"] = 0.25
        child.attributes["tags"] = ["a", "b\"quoted\""]
        child.addEvent(SpanEvent(name: "retry", at: Nanos(2_500), attributes: ["attempt": 2]))
        child.addLink(SpanLink(context: root.context, attributes: ["why": "caused by"]))
        child.setStatus(SpanStatus(code: .error, message: "boom"))
        child.end(at: Nanos(3_000))
        root.end(at: Nanos(4_000))
        let spans = tracer.buffer.takeBatch()
        return (spans[1], spans[0])
    }

    @Test func idsAreNeverZeroAndDiffer() {
        let random = TraceRandom()
        let traces = (0..<10_000).map { _ in random.traceID() }
        let spans = (0..<10_000).map { _ in random.spanID() }
        #expect(Set(traces).count == traces.count && Set(spans).count == spans.count)
        #expect(TraceID(high: 0, low: 0) == nil && SpanID(0) == nil)
        #expect(traces.allSatisfy { $0.hex.count == 32 } && spans.allSatisfy { $0.hex.count == 16 })
    }

    @Test func aTraceparentRoundTripsAndMalformedOnesAreRefused() throws {
        let tracer = Self.tracer()
        var carrier: [String: String] = [:]
        let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        var context = ServiceContext.topLevel
        tracer.extract(["traceparent": text, "tracestate": "vendor=x"], into: &context, using: DictionaryExtractor())
        let remote = try #require(context.spanContext)
        #expect(remote.traceID.hex == "4bf92f3577b34da6a3ce929d0e0e4736" && remote.spanID.hex == "00f067aa0ba902b7" && remote.isSampled)
        tracer.inject(context, into: &carrier, using: DictionaryInjector())
        #expect(carrier == ["traceparent": text, "tracestate": "vendor=x"])

        // A span under it: same trace, the remote span its parent, its own id in what it sends on.
        let span = tracer.startSpan("request", context: context)
        span.end()
        let record = try #require(tracer.buffer.takeBatch().first)
        #expect(record.context.traceID == remote.traceID && record.parentSpanID == remote.spanID && record.context.spanID != remote.spanID)
        #expect(TracePropagation.traceParent(of: span.context, by: tracer) == "00-\(remote.traceID.hex)-\(record.context.spanID.hex)-01")

        for malformed in [
            "", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba9-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1", "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            var refused = ServiceContext.topLevel
            tracer.extract(["traceparent": malformed], into: &refused, using: DictionaryExtractor())
            #expect(refused.spanContext == nil, "\(malformed)")
        }
    }

    @Test func aSpanIsRecordedOnceAndIgnoresChangesAfterItsEnd() {
        let tracer = Self.tracer()
        let span = tracer.startSpan("once", context: .topLevel)
        #expect(span.isRecording)
        span.end()
        span.attributes["late"] = "x"
        span.end()
        #expect(!span.isRecording && tracer.buffer.count == 1)
        #expect(tracer.buffer.takeBatch().first?.snapshot.attributes["late"] == nil)
    }

    @Test func theBufferDropsBeyondItsCapacityAndCountsThem() {
        let tracer = Self.tracer(capacity: 5, batchSize: 2)
        for _ in 0..<8 { tracer.startSpan("s", context: .topLevel).end() }
        #expect(tracer.buffer.count == 5 && tracer.buffer.takeDropped() == 3 && tracer.buffer.takeDropped() == 0)
        #expect(tracer.buffer.takeBatch().count == 2 && tracer.buffer.takeBatch().count == 2 && tracer.buffer.takeBatch().count == 1)
        #expect(tracer.buffer.takeBatch().isEmpty)
    }

    /// The protobuf body read back field by field with a wire reader of the test's own.
    @Test func protobufEncodingDecodesBack() throws {
        let tracer = Self.tracer()
        let (root, child) = Self.finishedTrace(tracer)
        let body = OTLPTraceRequest(resource: [("service.name", "render-worker"), ("deployment.environment", "prod")], spans: [child, root])
            .encoded(as: .protobuf)
        let request = try Wire(Array(body))
        let resourceSpans = try #require(request.messages(1).first)
        let resource = try #require(resourceSpans.messages(1).first)
        let resourceAttributes = try resource.messages(1).map { try ($0.string(1), $0.messages(2)[0].string(1)) }
        #expect(resourceAttributes.map(\.0) == ["service.name", "deployment.environment"] && resourceAttributes.map(\.1) == ["render-worker", "prod"])
        let scope = try #require(resourceSpans.messages(2).first)
        #expect(try scope.messages(1)[0].string(1) == "wearbloom-fleet")
        let spans = try scope.messages(2)
        try #require(spans.count == 2)
        let (c, r) = (spans[0], spans[1])
        #expect(c.bytes(1) == child.context.traceID.bytes && c.bytes(2) == child.context.spanID.bytes && c.bytes(4) == root.context.spanID.bytes)
        #expect(r.bytes(1) == root.context.traceID.bytes && r.bytes(4) == nil && r.bytes(2) == root.context.spanID.bytes)
        #expect(try c.string(5) == "job run" && c.varint(6) == 5 && r.varint(6) == 2)
        #expect(c.fixed64(7) == 2_000 && c.fixed64(8) == 3_000 && r.fixed64(7) == 1_000 && r.fixed64(8) == 4_000)
        #expect(c.fixed32(16) == 1)
        var attributes: [String: Wire] = [:]
        for keyValue in try c.messages(9) { attributes[try keyValue.string(1)] = try keyValue.messages(2)[0] }
        #expect(try attributes["job.kind"]?.string(1) == "drill.noop")
        #expect(attributes["job.id"]?.varint(3) == 42)
        #expect(attributes["job.big"]?.varint(3).map { Int64(bitPattern: $0) } == -5_000_000_000)
        #expect(attributes["ok"]?.varint(2) == 1)
        #expect(attributes["share"]?.fixed64(4).map(Double.init(bitPattern:)) == 0.25)
        #expect(try attributes["tags"]?.messages(5)[0].messages(1).map { try $0.string(1) } == ["a", "b\"quoted\""])
        let event = try #require(try c.messages(11).first)
        #expect(try event.fixed64(1) == 2_500 && event.string(2) == "retry" && event.messages(3)[0].string(1) == "attempt")
        let link = try #require(try c.messages(13).first)
        #expect(link.bytes(1) == root.context.traceID.bytes && link.bytes(2) == root.context.spanID.bytes)
        let status = try #require(try c.messages(15).first)
        #expect(try status.string(2) == "boom" && status.varint(3) == 2)
        #expect(try r.messages(15).isEmpty && r.messages(9).isEmpty)
    }

    /// Nested lengths of one, two and three bytes (a message of 128 bytes and more, of 16 KiB
    /// and more) all read back.
    @Test func aLargeBatchDecodes() throws {
        let tracer = Self.tracer(capacity: 1_000, batchSize: 1_000)
        for index in 0..<300 {
            let span = tracer.startSpan("span \(index)", context: .topLevel)
            span.attributes["padding"] = String(repeating: "x", count: index)
            span.end()
        }
        let spans = tracer.buffer.takeBatch()
        let body = OTLPTraceRequest(resource: [("service.name", "s")], spans: spans).encoded(as: .protobuf)
        #expect(body.count > 1 << 14)
        let decoded = try Wire(Array(body)).messages(1)[0].messages(2)[0].messages(2)
        #expect(try decoded.map { try $0.string(5) } == spans.map(\.snapshot.name))
        #expect(try decoded.map { try $0.messages(9)[0].messages(2)[0].bytes(1)?.count ?? 0 } == Array(0..<300))
    }

    /// OTLP/JSON: ids in hex, enums as integers, 64-bit integers and times as strings.
    @Test func jsonEncodingFollowsTheOTLPMapping() throws {
        let tracer = Self.tracer()
        let (root, child) = Self.finishedTrace(tracer)
        let body = OTLPTraceRequest(resource: [("service.name", "dispatcher")], spans: [child, root]).encoded(as: .json)
        let document = try JSONValue(json: String(decoding: body, as: UTF8.self))
        let resourceSpans = try #require(document["resourceSpans"]?.items.first)
        let service = resourceSpans["resource"]?["attributes"]?.items.first
        #expect(service?["key"] == .string("service.name") && service?["value"]?["stringValue"] == .string("dispatcher"))
        let spans = resourceSpans["scopeSpans"]?.items.first?["spans"]?.items ?? []
        try #require(spans.count == 2)
        let c = spans[0]
        #expect(c["traceId"] == .string(child.context.traceID.hex) && c["spanId"] == .string(child.context.spanID.hex))
        #expect(c["parentSpanId"] == .string(root.context.spanID.hex) && spans[1]["parentSpanId"] == nil)
        #expect(c["name"] == .string("job run") && c["kind"] == .number(5) && c["flags"] == .number(1))
        #expect(c["startTimeUnixNano"] == .string("2000") && c["endTimeUnixNano"] == .string("3000"))
        var attributes: [String: JSONValue] = [:]
        for keyValue in c["attributes"]?.items ?? [] { attributes[keyValue["key"]?.jsonText ?? ""] = keyValue["value"] }
        #expect(attributes["\"job.id\""]?["intValue"] == .string("42") && attributes["\"job.big\""]?["intValue"] == .string("-5000000000"))
        #expect(attributes["\"ok\""]?["boolValue"] == .bool(true) && attributes["\"share\""]?["doubleValue"] == .number(0.25))
        let tags = attributes["\"tags\""]?["arrayValue"]?["values"]?.items.map { $0["stringValue"] }
        #expect(tags == [.string("a"), .string("b\"quoted\"")])
        #expect(c["status"]?["code"] == .number(2) && c["status"]?["message"] == .string("boom"))
        #expect(c["events"]?.items.first?["timeUnixNano"] == .string("2500"))
        #expect(c["links"]?.items.first?["spanId"] == .string(root.context.spanID.hex))
    }

    /// A batch's worth goes out at once, long before the schedule; the rest on graceful shutdown.
    /// Each export is sent outside the span the service was started in: no traceparent.
    @Test func theExporterSendsFullBatchesAtOnceAndTheRestOnShutdown() async throws {
        let collector = try await FakeCollector.start()
        defer { Task { await collector.stop() } }
        let tracer = Self.tracer(capacity: 100, batchSize: 3)
        var configuration = TracingConfiguration(tracesURL: collector.baseURL + "/v1/traces", serviceName: "test-service")
        configuration.format = .json
        configuration.scheduleDelay = .seconds(600)
        configuration.headers = [("X-Api-Key", "secret")]
        let client = RecordingClient(inner: CurlHTTPClient())
        let exporter = OTLPExporter(configuration: configuration, buffer: tracer.buffer, client: client, logger: Logger(label: "otel"))
        let group = ServiceGroup(configuration: .init(services: [.init(service: exporter)], logger: Logger(label: "test")))
        let outer = tracer.startSpan("outer", context: .topLevel)
        let running = Task { try await ServiceContext.withValue(outer.context) { try await group.run() } }

        for index in 0..<3 { tracer.startSpan("batch \(index)", context: .topLevel).end() }
        let batch = try await collector.spans(within: .seconds(10)) { $0.count == 3 }
        #expect(batch.map { Set($0.map(\.name)) } == ["batch 0", "batch 1", "batch 2"] && batch?.first?.service == "test-service")

        // Once the exporter waits again: a span ended while it still exports goes out with that
        // export (it sends until the buffer is empty).
        try await waitFor("the exporter waiting again") { tracer.buffer.exporterIsWaiting }
        tracer.startSpan("left over", context: .topLevel).end()
        // Not sent before the shutdown: a "not", so a window, after a batch went out above.
        try await Task.sleep(for: .milliseconds(300))
        #expect(collector.spans.count == 3)
        await group.triggerGracefulShutdown()
        try await running.value
        #expect(collector.spans.map(\.name).last == "left over" && collector.spans.count == 4)
        let requests = client.requests.withLock { $0 }
        #expect(requests.count == 2)
        #expect(requests.allSatisfy { request in
            !request.headers.contains { $0.name.lowercased() == "traceparent" }
                && request.headers.contains { $0 == ("Content-Type", "application/json") } && request.headers.contains { $0 == ("X-Api-Key", "secret") }
        })
    }

    @Test func theVariablesAreReadAndBadOnesRefusedWithoutQuotingSecrets() throws {
        #expect(try TracingConfiguration(environment: [:], defaultServiceName: "x") == nil)
        #expect(try TracingConfiguration(environment: ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"], defaultServiceName: "x") == nil)
        let defaults = try #require(try TracingConfiguration(environment: ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"], defaultServiceName: "image-worker"))
        #expect(defaults.tracesURL == "http://c:4318/v1/traces" && defaults.format == .protobuf && defaults.headers.isEmpty)
        #expect(defaults.scheduleDelay == .seconds(5) && defaults.maxQueueSize == 2048 && defaults.maxExportBatchSize == 512)
        #expect(defaults.timeout == .seconds(10) && defaults.logLevel == .warning && defaults.ratio == 1)
        #expect(defaults.resource.map(\.key) == ["service.name"] && defaults.resource.map(\.value) == ["image-worker"])

        let set = try #require(try TracingConfiguration(environment: [
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://t.example/otlp/traces",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json", "OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=s%3Dcret, x-team = fleet",
            "OTEL_SERVICE_NAME": "api", "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,service.name=ignored",
            "OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_BSP_MAX_QUEUE_SIZE": "10", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "4",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "2500", "OTEL_LOG_LEVEL": "info",
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1",
        ], defaultServiceName: "x"))
        #expect(set.tracesURL == "https://t.example/otlp/traces" && set.format == .json)
        #expect(set.headers.map(\.name) == ["x-api-key", "x-team"] && set.headers.map(\.value) == ["s=cret", "fleet"])
        #expect(set.resource.map(\.key) == ["service.name", "deployment.environment"] && set.resource.map(\.value) == ["api", "prod"])
        #expect(set.scheduleDelay == .milliseconds(100) && set.maxQueueSize == 10 && set.maxExportBatchSize == 4)
        #expect(set.timeout == .milliseconds(2500) && set.logLevel == .info && set.ratio == 0.1)

        let base = ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"]
        for (variable, value) in [
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"), ("OTEL_EXPORTER_OTLP_HEADERS", "token-without-equals-s3cret"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "=s3cret"), ("OTEL_BSP_MAX_QUEUE_SIZE", "0"), ("OTEL_BSP_SCHEDULE_DELAY", "soon"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4096"), ("OTEL_LOG_LEVEL", "loud"), ("OTEL_EXPORTER_OTLP_ENDPOINT", "c:4318"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "-1"),
        ] {
            let error = #expect(throws: ConfigurationError.self, "\(variable)=\(value)") {
                try TracingConfiguration(environment: base.merging([variable: value]) { $1 }, defaultServiceName: "x")
            }
            #expect(error?.variable == variable)
            #expect(error?.description.contains("s3cret") == false)
        }
    }
}

/// A time for a span's start or end.
private struct Nanos: TracerInstant {
    let nanosecondsSinceEpoch: UInt64
    init(_ value: UInt64) { nanosecondsSinceEpoch = value }
    static func < (lhs: Self, rhs: Self) -> Bool { lhs.nanosecondsSinceEpoch < rhs.nanosecondsSinceEpoch }
}

private struct DictionaryInjector: Injector {
    func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) { carrier[key] = value }
}

private struct DictionaryExtractor: Extractor {
    func extract(key: String, from carrier: [String: String]) -> String? { carrier[key] }
}

/// Passes requests on, keeping each.
private final class RecordingClient: HTTPClient {
    let inner: any HTTPClient
    let requests = Mutex<[HTTPClientRequest]>([])

    init(inner: any HTTPClient) { self.inner = inner }

    func execute(_ request: HTTPClientRequest) async throws -> HTTPClientResponse {
        requests.withLock { $0.append(request) }
        return try await inner.execute(request)
    }
}

/// A protobuf message's fields by number, read from the wire as the test's own check on the
/// encoder: varint (0), fixed64 (1), length-delimited (2), fixed32 (5).
private struct Wire {
    enum Value {
        case varint(UInt64), fixed64(UInt64), bytes([UInt8]), fixed32(UInt32)
    }

    struct Malformed: Error {}

    private(set) var fields: [(number: Int, value: Value)] = []

    init(_ bytes: [UInt8]) throws {
        var index = 0
        func varint() throws -> UInt64 {
            var result: UInt64 = 0
            var shift: UInt64 = 0
            while true {
                guard index < bytes.count, shift < 64 else { throw Malformed() }
                let byte = bytes[index]
                index += 1
                result |= UInt64(byte & 0x7f) << shift
                if byte < 0x80 { return result }
                shift += 7
            }
        }
        func take(_ count: Int) throws -> [UInt8] {
            guard count >= 0, index + count <= bytes.count else { throw Malformed() }
            defer { index += count }
            return Array(bytes[index..<index + count])
        }
        func little<T: FixedWidthInteger>(_ count: Int, as: T.Type) throws -> T {
            try take(count).reversed().reduce(T.zero) { $0 << 8 | T($1) }
        }
        while index < bytes.count {
            let tag = try varint()
            let number = Int(tag >> 3)
            switch tag & 7 {
            case 0: fields.append((number, .varint(try varint())))
            case 1: fields.append((number, .fixed64(try little(8, as: UInt64.self))))
            case 2: fields.append((number, .bytes(try take(Int(try varint())))))
            case 5: fields.append((number, .fixed32(try little(4, as: UInt32.self))))
            default: throw Malformed()
            }
        }
    }

    /// The first field `number` whose value `pick` takes.
    private func first<T>(_ number: Int, _ pick: (Value) -> T?) -> T? {
        for field in fields where field.number == number {
            if let value = pick(field.value) { return value }
        }
        return nil
    }

    func bytes(_ number: Int) -> [UInt8]? { first(number) { if case .bytes(let value) = $0 { value } else { nil } } }
    func varint(_ number: Int) -> UInt64? { first(number) { if case .varint(let value) = $0 { value } else { nil } } }
    func fixed64(_ number: Int) -> UInt64? { first(number) { if case .fixed64(let value) = $0 { value } else { nil } } }
    func fixed32(_ number: Int) -> UInt32? { first(number) { if case .fixed32(let value) = $0 { value } else { nil } } }

    func string(_ number: Int) throws -> String {
        guard let bytes = bytes(number) else { throw Malformed() }
        return String(decoding: bytes, as: UTF8.self)
    }

    func messages(_ number: Int) throws -> [Wire] {
        try fields.filter { $0.number == number }.compactMap { field in
            guard case .bytes(let bytes) = field.value else { return nil }
            return try Wire(bytes)
        }
    }
}

private extension JSONValue {
    var items: [JSONValue] { if case .array(let items) = self { items } else { [] } }
}
