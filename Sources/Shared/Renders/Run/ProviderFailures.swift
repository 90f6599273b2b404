import Providers

/// How the render domain reads a provider's errors: the failure a render ends with (and so what
/// it costs, `RenderFailureCode.isTechnical`).
extension ProviderError {
    /// The failure a render ends with when this error ends it (its message is this description,
    /// which names no key or token).
    public var renderFailure: RenderFailure { RenderFailure(failureCode, description) }

    private var failureCode: RenderFailureCode {
        switch self {
        case .transient, .malformedResponse, .failed: .providerDown
        case .rateLimited: .providerRateLimited
        case .unauthorized, .unsupportedCategory: .providerMisconfigured
        case .rejected(_, let status, _): HTTPStatus.refusesInput(status) ? .providerRejected : .providerMisconfigured
        }
    }
}

extension ProviderFailure {
    /// The failure a render ends with when the provider's job ended so: a fault on the provider's
    /// side (it says the same input may succeed) or its verdict on this input.
    func renderFailure(provider: String) -> RenderFailure {
        RenderFailure(retryable || code.hasPrefix("http_5") ? .providerDown : .providerRejected, "\(provider): the provider's job failed: \(description)")
    }
}
