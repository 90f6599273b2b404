/// Exponential backoff with jitter: `base · 2^(attempt−1)`, capped, then spread ±25 % so a
/// burst of failures does not come back as a burst.
public struct RetryPolicy: Sendable, Hashable {
    public var base: Duration
    public var cap: Duration

    public init(base: Duration = .seconds(2), cap: Duration = .seconds(3600)) {
        self.base = base
        self.cap = cap
    }

    /// The wait before the attempt after `attempt` (1 = the first run failed).
    public func delay(after attempt: Int, jitter: Double = Double.random(in: -0.25...0.25)) -> Duration {
        let exponent = Double(min(max(attempt - 1, 0), 40))
        let raw = min(base.seconds * pow2(exponent), cap.seconds)
        return .milliseconds(Int64((raw * (1 + jitter) * 1000).rounded()))
    }

    private func pow2(_ exponent: Double) -> Double { Double(sign: .plus, exponent: Int(exponent), significand: 1) }
}
