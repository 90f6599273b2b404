import Metrics

/// The render metrics (swift-metrics; exported by the process's `/metrics`):
/// - `fleet_renders_finished_total{provider,outcome}`: complete, RENDER_FAILED, RENDER_TIMEOUT
/// - `fleet_render_seconds{provider}`: request to end, for renders this worker ended
/// - `fleet_render_provider_calls_total{provider,call,outcome}` and
///   `fleet_render_provider_seconds{provider,call}`: submit and poll calls to the provider
/// - `fleet_credits_settled_total{entry}`: consume, release (refunds are counted by the dispatcher)
/// - `fleet_render_retries_total{provider}`: failed renders an operator retried (`render.retry`)
public enum RenderMetrics {
    public static func retried(provider: String) {
        Counter(label: "fleet_render_retries_total", dimensions: [("provider", provider)]).increment()
    }

    public static func finished(provider: String, outcome: String, seconds: Double) {
        Counter(label: "fleet_renders_finished_total", dimensions: [("provider", provider), ("outcome", outcome)]).increment()
        Timer(label: "fleet_render_seconds", dimensions: [("provider", provider)]).recordNanoseconds(Int64(seconds * 1e9))
    }

    public static func providerCall(provider: String, call: String, outcome: String, seconds: Double) {
        Counter(label: "fleet_render_provider_calls_total", dimensions: [("provider", provider), ("call", call), ("outcome", outcome)]).increment()
        Timer(label: "fleet_render_provider_seconds", dimensions: [("provider", provider), ("call", call)]).recordNanoseconds(Int64(seconds * 1e9))
    }

    public static func creditSettled(_ entry: String, count: Int = 1) {
        Counter(label: "fleet_credits_settled_total", dimensions: [("entry", entry)]).increment(by: count)
    }
}
