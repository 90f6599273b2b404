/// One key's rule (nil: none limits it) and its use now.
public struct LimitLoad: Sendable, Equatable {
    public let rule: ConcurrencyLimit?
    public let running: Int
    /// The kind's jobs under the key not started yet: due, or waiting for the jobs they run after.
    public let waiting: Int
    public let startedInWindow: Int
    /// The kind's running jobs under the key: their owner reads how long each may hold its slot
    /// (render admission: the renders' ages and deadlines). Empty without a rule.
    public let runningJobIDs: [Int64]

    public init(rule: ConcurrencyLimit?, running: Int, waiting: Int, startedInWindow: Int, runningJobIDs: [Int64] = []) {
        self.rule = rule
        self.running = running
        self.waiting = waiting
        self.startedInWindow = startedInWindow
        self.runningJobIDs = runningJobIDs
    }
}

/// One limited key's use: `running` jobs carry it, `startedInWindow` started within the rule's window.
public struct LimitUsage: Sendable, Equatable {
    public let rule: String
    public let key: String
    public let running: Int
    public let startedInWindow: Int
    /// Due jobs carrying the key (exact rules only; 0 for keys under a prefix rule).
    public let waiting: Int
}
