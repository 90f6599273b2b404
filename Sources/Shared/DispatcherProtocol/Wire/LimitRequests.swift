/// A fleet-wide limit as the protocol shows it, with the use made of it now.
public struct LimitView: Codable, Sendable, Equatable {
    /// One key under the rule (the rule's own key, or each key in use under a prefix rule).
    public struct KeyUse: Codable, Sendable, Equatable {
        public let key: String
        public let running: Int
        public let startedInWindow: Int
        public let waiting: Int

        public init(key: String, running: Int, startedInWindow: Int, waiting: Int) {
            self.key = key
            self.running = running
            self.startedInWindow = startedInWindow
            self.waiting = waiting
        }
    }

    public let key: String
    @ExplicitNull public private(set) var maxRunning: Int?
    @ExplicitNull public private(set) var rate: Int?
    public let rateWindowSeconds: Double
    /// The rate in force: lower than `rate` while a provider's 429s keep it throttled.
    @ExplicitNull public private(set) var effectiveRate: Int?
    public let keys: [KeyUse]

    public init(key: String, maxRunning: Int?, rate: Int?, rateWindowSeconds: Double, effectiveRate: Int?, keys: [KeyUse]) {
        self.key = key
        self.maxRunning = maxRunning
        self.rate = rate
        self.rateWindowSeconds = rateWindowSeconds
        self.effectiveRate = effectiveRate
        self.keys = keys
    }
}

public struct LimitsResult: Codable, Sendable, Equatable {
    /// For `limit.set` and `limit.remove`: whether a rule was created, changed or removed; null for `limits.list`.
    @ExplicitNull public private(set) var changed: Bool?
    public let limits: [LimitView]

    public init(changed: Bool?, limits: [LimitView]) {
        self.changed = changed
        self.limits = limits
    }
}

/// `limits.list`: the fleet-wide limits and their use (`docs/queue.md`, "Limits").
public struct LimitsListRequest: DispatcherRequest {
    public static let op = "limits.list"
    public typealias Result = LimitsResult
    public init() {}
}

/// `limit.set`: creates or replaces the rule for `key` (a key, or a prefix ending in `*`);
/// every worker honours it from its next claim on. Clears a throttle.
public struct LimitSetRequest: DispatcherRequest {
    public static let op = "limit.set"
    public typealias Result = LimitsResult
    public let key: String
    public let maxRunning: Int?
    public let rate: Int?
    /// Default 60.
    public let rateWindowSeconds: Double?

    public init(key: String, maxRunning: Int? = nil, rate: Int? = nil, rateWindowSeconds: Double? = nil) {
        self.key = key
        self.maxRunning = maxRunning
        self.rate = rate
        self.rateWindowSeconds = rateWindowSeconds
    }
}

/// `limit.remove`: the key's jobs are no longer limited.
public struct LimitRemoveRequest: DispatcherRequest {
    public static let op = "limit.remove"
    public typealias Result = LimitsResult
    public let key: String

    public init(key: String) {
        self.key = key
    }
}
