import DispatcherProtocol
import FleetSupport
import Tracing

/// The dispatcher's span of one request, `request <op>`: it continues the frame's `traceparent`
/// when there is one and starts a trace otherwise; the jobs the request enqueues keep it.
enum RequestSpan {
    static func run<Result>(
        _ op: String, continuing traceParent: TraceParent?, _ body: () async throws -> Result
    ) async throws -> Result {
        try await withSpan("request \(op)", context: TracePropagation.context(continuing: traceParent?.rawValue), ofKind: .server) { span in
            span.attributes[TraceAttribute.op] = op
            do {
                let result = try await body()
                span.attributes[TraceAttribute.outcome] = "ok"
                return result
            } catch {
                let code = DispatcherError(mapping: error).code
                span.attributes[TraceAttribute.outcome] = code.rawValue
                // A refusal (BAD_ARGUMENT, NOT_FOUND…) is the caller's; only the server's own failures are errors.
                if code == .internal || code == .unavailable { span.setStatus(SpanStatus(code: .error)) }
                throw error
            }
        }
    }
}
