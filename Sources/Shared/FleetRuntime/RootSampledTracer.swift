import FleetSupport
import Synchronization
import Tracing

/// The tracer the fleet installs: decides each new trace before the tracer it wraps is asked
/// (`docs/operations.md`, "Traces"). A span with no parent is kept with probability `ratio`, from
/// a draw that costs a few nanoseconds; one not kept, and every span under a trace not sampled,
/// is a no-op span that never reaches `inner`. Only kept traces pay the wrapped tracer: swift-otel
/// makes its root spans' ids with a system call each and builds a span object before its sampler
/// says no, which cost a worker draining no-op jobs 8.8 µs a job at 10 % (`docs/benchmarks.md`,
/// "Tracing"). `inner` must then sample every root it is asked for and follow its parents
/// (`parentbased_always_on`): the ratio is applied here, once.
public struct RootSampledTracer<Inner: Tracer>: Tracer {
    public typealias Span = RootSampledSpan<Inner.Span>

    private let inner: Inner
    private let sampler: RootSampler

    public init(_ inner: Inner, sampler: RootSampler) {
        self.inner = inner
        self.sampler = sampler
    }

    public func startSpan<Instant: TracerInstant>(
        _ operationName: String,
        context: @autoclosure () -> ServiceContext,
        ofKind kind: SpanKind,
        at instant: @autoclosure () -> Instant,
        function: String,
        file fileID: String,
        line: UInt
    ) -> Span {
        let context = context()
        if context[DroppedTrace.self] != nil { return .dropped(NoOpTracer.NoOpSpan(context: context)) }
        switch parentSampled(context) {
        case true?:
            break
        case false?:
            return .dropped(NoOpTracer.NoOpSpan(context: context))
        case nil:
            // A new trace: one not kept still marks its context, so that the spans started under
            // it are dropped here too instead of each starting a trace of its own.
            guard sampler.keeps() else {
                var dropped = context
                dropped[DroppedTrace.self] = true
                return .dropped(NoOpTracer.NoOpSpan(context: dropped))
            }
        }
        return .kept(inner.startSpan(operationName, context: context, ofKind: kind, at: instant(), function: function, file: fileID, line: line))
    }

    /// Whether `context`'s span (its traceparent's flags, as the inner tracer writes them) is
    /// sampled; nil when it has none.
    private func parentSampled(_ context: ServiceContext) -> Bool? {
        TracePropagation.traceParent(of: context, by: inner).flatMap(TracePropagation.isSampled)
    }

    public func activeSpan(identifiedBy context: ServiceContext) -> Span? {
        inner.activeSpan(identifiedBy: context).map { .kept($0) }
    }

    public func forceFlush() { inner.forceFlush() }

    /// A dropped trace travels as a traceparent that says "not sampled" (fresh ids: no one
    /// records them), so what it reaches in other processes (a job it enqueued) is dropped too.
    public func inject<Carrier, Inject: Injector>(_ context: ServiceContext, into carrier: inout Carrier, using injector: Inject)
    where Inject.Carrier == Carrier {
        if context[DroppedTrace.self] != nil {
            injector.inject("00-\(sampler.hexID(bytes: 16))-\(sampler.hexID(bytes: 8))-00", forKey: TracePropagation.header, into: &carrier)
        } else {
            inner.inject(context, into: &carrier, using: injector)
        }
    }

    public func extract<Carrier, Extract: Extractor>(_ carrier: Carrier, into context: inout ServiceContext, using extractor: Extract)
    where Extract.Carrier == Carrier {
        inner.extract(carrier, into: &context, using: extractor)
    }
}

/// Marks the context of a new trace `RootSampledTracer` dropped.
private enum DroppedTrace: ServiceContextKey {
    typealias Value = Bool
}

/// A span of `RootSampledTracer`: the wrapped tracer's, or a no-op one.
public enum RootSampledSpan<Inner: Span>: Span {
    case kept(Inner)
    case dropped(NoOpTracer.NoOpSpan)

    private var span: any Span {
        switch self {
        case .kept(let span): span
        case .dropped(let span): span
        }
    }

    public var context: ServiceContext { span.context }

    public var operationName: String {
        get { span.operationName }
        nonmutating set { span.operationName = newValue }
    }

    public var attributes: SpanAttributes {
        get { span.attributes }
        nonmutating set { span.attributes = newValue }
    }

    public var isRecording: Bool { span.isRecording }

    public func setStatus(_ status: SpanStatus) { span.setStatus(status) }

    public func addEvent(_ event: SpanEvent) { span.addEvent(event) }

    public func recordError<Instant: TracerInstant>(_ error: any Error, attributes: SpanAttributes, at instant: @autoclosure () -> Instant) {
        span.recordError(error, attributes: attributes, at: instant())
    }

    public func addLink(_ link: SpanLink) { span.addLink(link) }

    public func end<Instant: TracerInstant>(at instant: @autoclosure () -> Instant) { span.end(at: instant()) }
}

/// Keeps a new trace with probability `ratio`: a SplitMix64 sequence behind one atomic counter,
/// seeded once from the system's generator. Not for secrets; the ids it makes name traces no
/// one records.
public struct RootSampler: Sendable {
    public let ratio: Double
    private let state: SharedState

    private final class SharedState: Sendable {
        let counter: Atomic<UInt64>
        init(seed: UInt64) { counter = Atomic(seed) }
    }

    public init(ratio: Double) {
        self.ratio = min(max(ratio, 0), 1)
        state = SharedState(seed: UInt64.random(in: .min ... .max))
    }

    public func keeps() -> Bool {
        if ratio >= 1 { return true }
        if ratio <= 0 { return false }
        // The top 53 bits as a fraction in [0, 1).
        return Double(next() >> 11) / Double(1 << 53) < ratio
    }

    func next() -> UInt64 {
        var z = state.counter.wrappingAdd(0x9E37_79B9_7F4A_7C15, ordering: .relaxed).newValue
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// `bytes` random bytes in lower-case hex, never all zero (W3C: an all-zero id is invalid).
    func hexID(bytes: Int) -> String {
        var hex = ""
        for _ in 0..<(bytes / 8) { hex += String(next() | 1, radix: 16).leftPadded(to: 16) }
        return hex
    }
}

private extension String {
    func leftPadded(to length: Int) -> String { String(repeating: "0", count: max(0, length - count)) + self }
}
