/// How a client comes back after its connection ended (an idle close, a dispatcher restart, a
/// network break): it opens a new one on the next request, retrying with exponential backoff and
/// full jitter (so a restarted dispatcher is not met by every backend at the same instant) until
/// `timeout` has passed since the first failed attempt.
public struct ReconnectPolicy: Sendable, Equatable {
    /// Off: a connection that ended stays ended and every request fails with `connectionClosed`.
    public var enabled: Bool
    /// How long requests wait for a connection before failing with `notConnected`.
    public var timeout: Duration
    public var initialBackoff: Duration
    public var maxBackoff: Duration
    /// How many times one safe request is sent again, against a dispatcher that keeps dying on it.
    public var maxResends: Int

    public init(enabled: Bool = true, timeout: Duration = .seconds(30), initialBackoff: Duration = .milliseconds(50),
                maxBackoff: Duration = .seconds(2), maxResends: Int = 5) {
        self.enabled = enabled
        self.timeout = timeout
        self.initialBackoff = initialBackoff
        self.maxBackoff = maxBackoff
        self.maxResends = maxResends
    }

    public static let `default` = ReconnectPolicy()
    public static let disabled = ReconnectPolicy(enabled: false)

    /// The pause before attempt `attempt` (1 for the first retry): uniform in [0, min(max, initial·2^(attempt−1))].
    func backoff(beforeAttempt attempt: Int) -> Duration {
        let ceiling = min(maxBackoff, initialBackoff * (1 << min(attempt - 1, 20)))
        let nanoseconds = Double(ceiling.components.seconds) * 1e9 + Double(ceiling.components.attoseconds) / 1e9
        return .nanoseconds(Int64(Double.random(in: 0...nanoseconds)))
    }
}
