import Synchronization

/// The tracer's randomness: new traces' sampling draws and every id. A SplitMix64 sequence behind
/// one atomic counter, seeded once from the system's generator: a few nanoseconds a draw where the
/// system generator costs a `getrandom` call each (swift-otel's ids were 39 % of its span start,
/// `docs/benchmarks.md`, "Traces off and on"). Not for secrets: ids only need to differ.
public final class TraceRandom: Sendable {
    private let counter: Atomic<UInt64>

    public init() { counter = Atomic(UInt64.random(in: .min ... .max)) }

    public func next() -> UInt64 {
        var z = counter.wrappingAdd(0x9E37_79B9_7F4A_7C15, ordering: .relaxed).newValue
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// True with probability `ratio`, from the top 53 bits of a draw as a fraction in [0, 1).
    public func draw(_ ratio: Double) -> Bool {
        if ratio >= 1 { return true }
        if ratio <= 0 { return false }
        return Double(next() >> 11) / Double(1 << 53) < ratio
    }

    public func traceID() -> TraceID {
        while true { if let id = TraceID(high: next(), low: next()) { return id } }
    }

    public func spanID() -> SpanID {
        while true { if let id = SpanID(next()) { return id } }
    }
}
