/// What a provider allows one account at once: the limit a new fleet starts with on the
/// provider's key (`provider:<name>`, a row in `queue_limits` that operators change at run time).
/// `RenderCapacity.defaultLimits` turns each provider's into the queue's limit.
public struct ProviderLimit: Sendable, Equatable {
    /// At most this many of its renders running at once; nil: no such bound.
    public var maxRunning: Int?
    /// At most this many started within `rateWindow`; nil: no such bound.
    public var rate: Int?
    public var rateWindow: Duration

    public init(maxRunning: Int? = nil, rate: Int? = nil, rateWindow: Duration = .seconds(60)) {
        self.maxRunning = maxRunning
        self.rate = rate
        self.rateWindow = rateWindow
    }
}
