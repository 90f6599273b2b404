import FleetSupport
import Tracing

/// The fleet's tracer (`docs/operations.md`, "Traces"): samples each new trace, records the spans
/// of the kept ones and hands each finished span to `buffer`, which the exporter empties; it is
/// also the W3C `traceparent` propagator `TracePropagation` writes and reads through.
///
/// Sampling comes first and is parent-based: a span with a parent follows the parent's sampled
/// flag (read from its context, nothing formatted); a new trace is kept with probability `ratio`.
/// A span not kept is a `FleetSpan` with no record: no allocation, nothing buffered. A dropped new
/// trace still gets ids, marked not sampled, so the spans under it are dropped too and what it
/// enqueues elsewhere travels as "not sampled".
public struct FleetTracer: Tracer {
    public typealias Span = FleetSpan

    /// The share of new traces kept, 0–1 (`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`).
    public let ratio: Double
    public let buffer: SpanBuffer
    private let random: TraceRandom

    public init(ratio: Double, buffer: SpanBuffer, random: TraceRandom = TraceRandom()) {
        self.ratio = min(max(ratio, 0), 1)
        self.buffer = buffer
        self.random = random
    }

    public func startSpan<Instant: TracerInstant>(
        _ operationName: String,
        context: @autoclosure () -> ServiceContext,
        ofKind kind: SpanKind,
        at instant: @autoclosure () -> Instant,
        function: String,
        file fileID: String,
        line: UInt
    ) -> FleetSpan {
        var context = context()
        let parent = context.spanContext
        let spanContext: SpanContext
        if let parent {
            guard parent.isSampled else { return FleetSpan(context: context, record: nil) }
            spanContext = SpanContext(traceID: parent.traceID, spanID: random.spanID(), flags: parent.flags, traceState: parent.traceState)
        } else {
            guard random.draw(ratio) else {
                context.spanContext = SpanContext(traceID: random.traceID(), spanID: random.spanID(), flags: 0)
                return FleetSpan(context: context, record: nil)
            }
            spanContext = SpanContext(traceID: random.traceID(), spanID: random.spanID(), flags: 1)
        }
        context.spanContext = spanContext
        let record = SpanRecord(
            name: operationName, kind: kind, context: spanContext, parentSpanID: parent?.spanID,
            start: instant().nanosecondsSinceEpoch, buffer: buffer)
        return FleetSpan(context: context, record: record)
    }

    /// Spans are exported on the exporter's schedule; this only wakes it early.
    public func forceFlush() { buffer.wake() }

    public func inject<Carrier, Inject: Injector>(_ context: ServiceContext, into carrier: inout Carrier, using injector: Inject)
    where Inject.Carrier == Carrier {
        guard let spanContext = context.spanContext else { return }
        injector.inject(spanContext.traceParent, forKey: TracePropagation.header, into: &carrier)
        if let traceState = spanContext.traceState { injector.inject(traceState, forKey: Self.traceStateHeader, into: &carrier) }
    }

    /// A well-formed traceparent becomes the context's span (a remote parent); anything else is
    /// ignored, and the spans started there begin a new trace.
    public func extract<Carrier, Extract: Extractor>(_ carrier: Carrier, into context: inout ServiceContext, using extractor: Extract)
    where Extract.Carrier == Carrier {
        guard let traceParent = extractor.extract(key: TracePropagation.header, from: carrier),
              let spanContext = SpanContext(traceParent: traceParent, traceState: extractor.extract(key: Self.traceStateHeader, from: carrier))
        else { return }
        context.spanContext = spanContext
    }

    static let traceStateHeader = "tracestate"
}
