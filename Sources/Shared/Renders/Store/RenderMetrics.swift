import Metrics

/// The render metrics (swift-metrics; exported by the process's `/metrics`):
/// - `fleet_renders_finished_total{provider,outcome}`: complete, RENDER_FAILED, RENDER_TIMEOUT
/// - `fleet_renders_failed_total{provider,code,technical}`: failed renders by `RenderFailureCode`
///   (`technical`: "true" or "false", `isTechnical`)
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

    /// A failed render, by why it failed.
    public static func failed(provider: String, code: RenderFailureCode) {
        Counter(label: "fleet_renders_failed_total", dimensions: [("provider", provider), ("code", code.rawValue), ("technical", "\(code.isTechnical)")])
            .increment()
    }

    /// A render a sweep failed (it ran nowhere, so no run time is recorded).
    static func sweptFailed(_ render: RenderStore.Ended, _ code: RenderFailureCode) {
        Counter(label: "fleet_renders_finished_total", dimensions: [("provider", render.provider), ("outcome", code.errorCode.rawValue)]).increment()
        failed(provider: render.provider, code: code)
        if render.charged { creditSettled("release") }
    }

    public static func providerCall(provider: String, call: String, outcome: String, seconds: Double) {
        Counter(label: "fleet_render_provider_calls_total", dimensions: [("provider", provider), ("call", call), ("outcome", outcome)]).increment()
        Timer(label: "fleet_render_provider_seconds", dimensions: [("provider", provider), ("call", call)]).recordNanoseconds(Int64(seconds * 1e9))
    }

    public static func creditSettled(_ entry: String, count: Int = 1) {
        Counter(label: "fleet_credits_settled_total", dimensions: [("entry", entry)]).increment(by: count)
    }
}
