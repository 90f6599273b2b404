import Foundation

/// A fleet-wide limit on the jobs carrying a key (`NewJob.limitKeys`): at most `maxRunning` of
/// them running at once, and/or at most `rate` started within any `rateWindow`. The key names
/// one key (`provider:fal-fashn`) or, ending in `*`, every key with that prefix, each on its own
/// (`user:*`: each user at most so many). A row in `queue_limits`: changed at run time, honoured
/// by every claim from the next one on (`docs/queue.md`, "Limits").
public struct ConcurrencyLimit: Sendable, Hashable, Codable {
    public var key: String
    public var maxRunning: Int?
    public var rate: Int?
    public var rateWindow: Duration
    /// Set by `limitThrottle` when the limited service said it had too much (429), never by an operator.
    public var throttle: Throttle?

    /// A rate lowered for a while, additive-increase/multiplicative-decrease: halved from what was
    /// in force (`from`) at each overload, at most every `minimumInterval`, and climbing back by a
    /// tenth of `from` every `recoveryStep`, so every worker eases off together and comes back.
    public struct Throttle: Sendable, Hashable, Codable {
        public var rate: Int
        public var from: Int
        /// How long ago it was last lowered.
        public var age: Duration

        public static let recoveryStep = Duration.seconds(30)
        public static let minimumInterval = Duration.seconds(5)

        /// The throttled rate now; nil once it has climbed back to `from`.
        public var current: Int? {
            let recovered = rate + Int(age / Self.recoveryStep) * max(1, from / 10)
            return recovered >= from ? nil : recovered
        }
    }

    public init(key: String, maxRunning: Int? = nil, rate: Int? = nil, rateWindow: Duration = .seconds(60), throttle: Throttle? = nil) {
        self.key = key
        self.maxRunning = maxRunning
        self.rate = rate
        self.rateWindow = rateWindow
        self.throttle = throttle
    }

    /// The rate in force: the configured one, or lower while a throttle lasts.
    public var effectiveRate: Int? {
        guard let throttled = throttle?.current else { return rate }
        return min(rate ?? .max, throttled)
    }

    public var isPrefix: Bool { key.hasSuffix("*") }

    /// Whether this rule limits `jobKey`.
    public func matches(_ jobKey: String) -> Bool {
        isPrefix ? jobKey.hasPrefix(key.dropLast()) : jobKey == key
    }

    /// 1 to 100 of A-Z a-z 0-9 . _ : - (no space: the insert joins keys with spaces).
    static func isValidKey(_ key: some StringProtocol) -> Bool {
        (1...100).contains(key.utf8.count) && key.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: ":"), UInt8(ascii: "-"): true
            default: false
            }
        }
    }

    /// Checks a rule before it is stored.
    public func validated() throws -> ConcurrencyLimit {
        let bare = isPrefix ? String(key.dropLast()) : key
        guard Self.isValidKey(bare) else {
            throw QueueError.invalidLimit("key \(key.debugDescription) must be 1 to 100 of A-Z a-z 0-9 . _ : - (and may end in *)")
        }
        guard maxRunning != nil || rate != nil else { throw QueueError.invalidLimit("\(key): give max running, a rate, or both") }
        if let maxRunning, maxRunning < 0 { throw QueueError.invalidLimit("\(key): max running must not be negative") }
        if let rate, rate < 0 { throw QueueError.invalidLimit("\(key): the rate must not be negative") }
        guard rateWindow > .zero, rateWindow <= .seconds(3600) else { throw QueueError.invalidLimit("\(key): the window must be within 1 hour") }
        return self
    }

    /// Checks the keys a job carries.
    static func validate(jobKeys: [String]) throws {
        guard jobKeys.count <= 8 else { throw QueueError.invalidJob(field: .limitKeys, reason: "at most 8 keys") }
        for key in jobKeys where !isValidKey(key) {
            throw QueueError.invalidJob(field: .limitKeys, reason: "\(key.debugDescription) must be 1 to 100 of A-Z a-z 0-9 . _ : -")
        }
    }
}

/// The rules in force and the use made of them, as one claim sees them under the rules' lock.
struct LimitLedger {
    let rules: [ConcurrencyLimit]
    /// Per job key: running jobs carrying it.
    var running: [String: Int]
    /// Per job key: ages of its starts still inside some window.
    let startAges: [String: [Duration]]

    /// The most specific rule for a key: its own, else the longest prefix.
    func rule(for jobKey: String) -> ConcurrencyLimit? {
        if let exact = rules.first(where: { !$0.isPrefix && $0.key == jobKey }) { return exact }
        return rules.filter { $0.isPrefix && $0.matches(jobKey) }.max { $0.key.count < $1.key.count }
    }

    /// How many more jobs with `jobKey` may start now; nil when no rule limits it.
    func remaining(_ jobKey: String) -> Int? {
        guard let rule = rule(for: jobKey) else { return nil }
        var remaining = Int.max
        if let maxRunning = rule.maxRunning { remaining = maxRunning - running[jobKey, default: 0] }
        if let rate = rule.effectiveRate {
            let started = startAges[jobKey, default: []].count { $0 < rule.rateWindow } + startsInBatch[jobKey, default: 0]
            remaining = min(remaining, rate - started)
        }
        return max(0, remaining)
    }

    /// Keys seen in use that are at their limit, and the prefixes whose rule allows none at all:
    /// the candidate query leaves their jobs out, so a user with many queued jobs does not hide
    /// another user's first one.
    func fullKeys() -> (keys: [String], prefixes: [String]) {
        let seen = Set(running.keys).union(startAges.keys)
        let keys = seen.filter { remaining($0) == 0 }
            + rules.filter { !$0.isPrefix && remaining($0.key) == 0 }.map(\.key)
        let prefixes = rules.filter { $0.isPrefix && ($0.maxRunning == 0 || $0.effectiveRate == 0) }.map { String($0.key.dropLast()) }
        return (Array(Set(keys)).sorted(), prefixes)
    }

    /// Takes a job with `keys` if every limited key has room, and counts it.
    mutating func admit(_ keys: [String]) -> Bool {
        let distinct = Set(keys)
        guard distinct.allSatisfy({ (remaining($0) ?? 1) > 0 }) else { return false }
        for key in distinct where rule(for: key) != nil {
            running[key, default: 0] += 1
            startsInBatch[key, default: 0] += 1
        }
        return true
    }

    /// Per limited key: starts admitted by this claim, to record in `limit_starts` (for rates,
    /// and for the rate a throttle halves).
    private(set) var startsInBatch: [String: Int] = [:]

    init(rules: [ConcurrencyLimit], running: [String: Int], startAges: [String: [Duration]]) {
        self.rules = rules
        self.running = running
        self.startAges = startAges
    }
}
