import Foundation

/// A webhook request's headers looked up in any letter case, and the timestamp rule fal and
/// Replicate share: whole epoch seconds, within a tolerance of now (against replays).
struct WebhookHeaders {
    enum Freshness: Equatable {
        case fresh
        case malformed
        case stale(skewSeconds: Int)
    }

    private let values: [String: String]

    init(_ headers: [String: String]) {
        var lowered: [String: String] = [:]
        for (name, value) in headers { lowered[name.lowercased()] = value }
        values = lowered
    }

    /// The non-empty value of `name` (lower case), else the error `missing` makes of the name.
    func required<E: Error>(_ name: String, or missing: (String) -> E) throws(E) -> String {
        guard let value = values[name], !value.isEmpty else { throw missing(name) }
        return value
    }

    static func freshness(of timestamp: String, now: Date, tolerance: TimeInterval) -> Freshness {
        guard let seconds = Int(timestamp) else { return .malformed }
        let skew = now.timeIntervalSince1970 - TimeInterval(seconds)
        return abs(skew) <= tolerance ? .fresh : .stale(skewSeconds: Int(skew))
    }
}
