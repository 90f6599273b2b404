import Synchronization
import Tracing

/// A span of `FleetTracer`: its context, and the record of a sampled one (nil: not sampled,
/// every call a no-op, nothing allocated).
public struct FleetSpan: Span {
    public let context: ServiceContext
    let record: SpanRecord?

    public var operationName: String {
        get { record?.state.withLock { $0.name } ?? "" }
        nonmutating set { record?.update { $0.name = newValue } }
    }

    public var attributes: SpanAttributes {
        get { record?.state.withLock { $0.attributes } ?? [:] }
        nonmutating set { record?.update { $0.attributes = newValue } }
    }

    /// Sampled and not yet ended.
    public var isRecording: Bool { record?.state.withLock { $0.end == nil } ?? false }

    public func setStatus(_ status: SpanStatus) { record?.update { $0.status = status } }

    public func addEvent(_ event: SpanEvent) { record?.update { $0.events.append(event) } }

    /// OpenTelemetry's `exception` event; the status is the caller's to set.
    public func recordError<Instant: TracerInstant>(_ error: any Error, attributes: SpanAttributes, at instant: @autoclosure () -> Instant) {
        guard record != nil else { return }
        var attributes = attributes
        attributes["exception.type"] = String(reflecting: type(of: error))
        attributes["exception.message"] = "\(error)"
        addEvent(SpanEvent(name: "exception", at: instant(), attributes: attributes))
    }

    /// A link to a context with no span (outside any trace) says nothing and is left out.
    public func addLink(_ link: SpanLink) {
        guard let linked = link.context.spanContext else { return }
        record?.update { $0.links.append(SpanRecord.Link(context: linked, attributes: link.attributes)) }
    }

    /// The first end counts; the span then goes to the exporter's buffer.
    public func end<Instant: TracerInstant>(at instant: @autoclosure () -> Instant) {
        guard let record else { return }
        let ended = record.state.withLock { state in
            guard state.end == nil else { return false }
            state.end = instant().nanosecondsSinceEpoch
            return true
        }
        if ended { record.buffer.append(record) }
    }
}

/// A sampled span: what is fixed at its start, and what changes until it ends behind a lock
/// (a span may be touched from any task). Once ended it changes no more and waits in the buffer.
public final class SpanRecord: Sendable {
    public let kind: SpanKind
    public let context: SpanContext
    public let parentSpanID: SpanID?
    public let start: UInt64
    let buffer: SpanBuffer
    let state: Mutex<State>

    public struct State: Sendable {
        public var name: String
        public var attributes: SpanAttributes = [:]
        public var events: [SpanEvent] = []
        public var links: [Link] = []
        public var status: SpanStatus?
        /// Nanoseconds since 1970; nil while the span runs.
        public var end: UInt64?
    }

    public struct Link: Sendable {
        public let context: SpanContext
        public let attributes: SpanAttributes
    }

    init(name: String, kind: SpanKind, context: SpanContext, parentSpanID: SpanID?, start: UInt64, buffer: SpanBuffer) {
        self.kind = kind
        self.context = context
        self.parentSpanID = parentSpanID
        self.start = start
        self.buffer = buffer
        state = Mutex(State(name: name))
    }

    /// What the span holds now (once ended, for good).
    public var snapshot: State { state.withLock { $0 } }

    /// Changes to an ended span are ignored, as OpenTelemetry's API says.
    func update(_ change: (inout State) -> Void) {
        state.withLock { state in
            if state.end == nil { change(&state) }
        }
    }
}
