import Logging
import Tracing

extension Logger.MetadataProvider {
    /// Log lines written inside a span carry its `trace_id` and `span_id` in hex, and
    /// `trace_flags` (1: sampled, 0: a trace no one records), so one trace's lines can be found in
    /// every process's log.
    public static let traceContext = Logger.MetadataProvider {
        guard let span = ServiceContext.current?.spanContext else { return [:] }
        return ["trace_id": "\(span.traceID.hex)", "span_id": "\(span.spanID.hex)", "trace_flags": "\(span.flags)"]
    }
}
