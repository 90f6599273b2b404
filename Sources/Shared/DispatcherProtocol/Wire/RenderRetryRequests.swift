import Foundation

/// `render.retry` (role `operate`): failed renders back to `pending`, each as a whole in one
/// transaction: a new deadline, its credit reserved again (charged renders; a user with no credit
/// left is refused), its job and any failed input jobs run again, its completion callback sent
/// again at its new end. Only a technical failure is retried (not a photo the provider refused,
/// `PROVIDER_REJECTED`, or one that is no usable image, `IMAGE_INVALID`). One render by
/// `renderId` (a refusal is the answer's error), or the failed renders matching the filter
/// (`errorCode`, `failureCode`, `provider`, failed `since`; technical failures only), the oldest
/// failure first, at most `limit` (each refusal listed in `refused`). `dryRun`: which renders it
/// would retry, nothing changed (credits are not checked).
public struct RetryRendersRequest: DispatcherRequest {
    public static let op = "render.retry"
    public static let defaultLimit = 100
    public static let maxLimit = 10_000

    /// A render left failed, and why.
    public struct Refused: Codable, Sendable, Equatable {
        public let renderId: String
        /// `INSUFFICIENT_CREDITS`, `SUBSCRIPTION_EXPIRED` or `RENDER_NOT_RETRYABLE`.
        public let code: DispatcherErrorCode
        public let message: String
        public init(renderId: String, code: DispatcherErrorCode, message: String) {
            self.renderId = renderId
            self.code = code
            self.message = message
        }
    }

    public struct Result: Codable, Sendable, Equatable {
        public let dryRun: Bool
        /// Renders retried (a dry run: that would be).
        public let count: Int
        public let renderIds: [String]
        public let refused: [Refused]
        public init(dryRun: Bool, renderIds: [String], refused: [Refused] = []) {
            self.dryRun = dryRun
            self.count = renderIds.count
            self.renderIds = renderIds
            self.refused = refused
        }
    }

    /// One render; or leave it out for the filter.
    public let renderId: String?
    /// The render's business code: `RENDER_FAILED` or `RENDER_TIMEOUT`.
    public let errorCode: String?
    /// Why it failed: one of the render failure codes (`PROVIDER_DOWN`, `TIMEOUT`…).
    public let failureCode: String?
    public let provider: String?
    /// Failed at or after.
    public let since: Date?
    /// Default 100, at most 10,000.
    public let limit: Int?
    public let dryRun: Bool?

    public init(renderId: String, dryRun: Bool? = nil) {
        self.renderId = renderId
        errorCode = nil
        failureCode = nil
        provider = nil
        since = nil
        limit = nil
        self.dryRun = dryRun
    }

    public init(
        errorCode: String? = nil, failureCode: String? = nil, provider: String? = nil, since: Date? = nil, limit: Int? = nil, dryRun: Bool? = nil
    ) {
        renderId = nil
        self.errorCode = errorCode
        self.failureCode = failureCode
        self.provider = provider
        self.since = since
        self.limit = limit
        self.dryRun = dryRun
    }
}

/// A dry run changes nothing; a retry sent twice would retry a render that failed again.
extension RetryRendersRequest { public var isSafeToRepeat: Bool { dryRun == true } }
