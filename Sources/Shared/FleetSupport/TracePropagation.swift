import Tracing

/// A trace's context carried across processes as a W3C `traceparent`: a request frame's field,
/// a job row's `trace_parent`, a provider request's header. The bootstrapped instrument writes
/// and reads it; with none (tracing off) nothing is written, nothing read, and the callers keep
/// no trace at all.
public enum TracePropagation {
    /// The traceparent of `context`'s span; nil when tracing is off or no span is current.
    public static func traceParent(of context: ServiceContext? = .current) -> String? {
        guard let context else { return nil }
        return traceParent(of: context, by: InstrumentationSystem.instrument)
    }

    /// The traceparent `instrument` writes for `context`'s span; nil when it has none.
    public static func traceParent(of context: ServiceContext, by instrument: some Instrument) -> String? {
        var fields: [String: String] = [:]
        instrument.inject(context, into: &fields, using: FieldsInjector())
        return fields[header]
    }

    /// A context whose spans continue `traceParent`'s trace; the top level when it is nil or
    /// tracing is off (a new trace starts there).
    public static func context(continuing traceParent: String?) -> ServiceContext {
        var context = ServiceContext.topLevel
        if let traceParent {
            InstrumentationSystem.instrument.extract([header: traceParent], into: &context, using: FieldsExtractor())
        }
        return context
    }

    /// The sampled flag of a well-formed traceparent (`00-<trace id>-<parent id>-<flags>`), read
    /// without parsing it into a context; nil when it is malformed.
    public static func isSampled(_ traceParent: String) -> Bool? {
        let fields = traceParent.utf8.split(separator: UInt8(ascii: "-"), omittingEmptySubsequences: false)
        guard fields.count == 4, fields[1].count == 32, fields[2].count == 16, fields[3].count == 2,
              let flags = UInt8(String(decoding: fields[3], as: UTF8.self), radix: 16) else { return nil }
        return flags & 1 == 1
    }

    /// Whether a tracer was bootstrapped (read once by a long-lived caller, not per job): with
    /// none, a hot path skips its spans altogether. The no-op spans still cost the queue's drain
    /// 10–14 % (task-local contexts, attributes, clock reads; docs/benchmarks.md).
    public static var isTracing: Bool { !(InstrumentationSystem.tracer is NoOpTracer) }

    /// The header's and the field's name.
    public static let header = "traceparent"
}

private struct FieldsInjector: Injector {
    func inject(_ value: String, forKey key: String, into fields: inout [String: String]) { fields[key] = value }
}

private struct FieldsExtractor: Extractor {
    func extract(key: String, from fields: [String: String]) -> String? { fields[key] }
}
