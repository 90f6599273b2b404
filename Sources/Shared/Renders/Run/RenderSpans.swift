import FleetSupport
import Tracing

/// The spans of one render's steps (provider submit, provider wait, download, store, settle),
/// children of its job's `job run`, each naming the render and its provider.
struct RenderSpans: Sendable {
    let renderID: String
    let provider: String
    /// False when no tracer was bootstrapped: the steps run without spans (no-op spans are not
    /// free: a task-local context and the tracer's lock per step).
    let enabled: Bool

    /// `kind`: `.client` for the steps that call the provider.
    func run<T>(_ step: String, kind: SpanKind = .internal, _ body: (any Span) async throws -> T) async rethrows -> T {
        guard enabled else { return try await body(NoOpTracer.NoOpSpan(context: .topLevel)) }
        return try await withSpan(step, ofKind: kind) { span in
            span.attributes[TraceAttribute.renderID] = renderID
            span.attributes[TraceAttribute.provider] = provider
            return try await body(span)
        }
    }
}
