extension Duration {
    /// The duration in seconds, as a Double.
    public var seconds: Double {
        let (whole, attoseconds) = components
        return Double(whole) + Double(attoseconds) / 1e18
    }

    /// Whole milliseconds rounded up, at least 1 (libcurl reads 0 as "no limit").
    var milliseconds: Int { max(1, Int((seconds * 1000).rounded(.up))) }
}
