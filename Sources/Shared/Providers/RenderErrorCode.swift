/// The business codes a render ends with or is refused with (docs/product.md, "Error codes").
/// Here, beside the providers, because a provider's error carries one (`ProviderError.code`).
/// `RENDER_BUSY` and the onboarding token's codes are not here: only the protocol carries them
/// (`DispatcherErrorCode`).
public enum RenderErrorCode: String, Codable, Sendable {
    case renderFailed = "RENDER_FAILED"
    case renderTimeout = "RENDER_TIMEOUT"
    case insufficientCredits = "INSUFFICIENT_CREDITS"
    case invalidCategory = "INVALID_CATEGORY"
    case subscriptionExpired = "SUBSCRIPTION_EXPIRED"
}
