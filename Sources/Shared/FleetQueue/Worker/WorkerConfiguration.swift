import FleetSupport
/// How a worker process claims and runs jobs.
public struct WorkerConfiguration: Sendable {
    /// How many jobs of each kind may run at once in this process.
    public var concurrency: [JobKind: Int]
    /// Only claim from these queues; nil claims from any.
    public var queues: [String]?
    /// A running job's lease; renewed every third of it while the job runs.
    public var lease: Duration
    /// The guaranteed look for work when no notification arrives (±10 % jitter).
    public var pollInterval: Duration
    /// On SIGTERM, how long running jobs may take to finish before they are handed back.
    public var shutdownGrace: Duration
    public var retry: RetryPolicy
    /// The most jobs one claim statement takes.
    public var maxClaimBatch: Int
    /// While a fleet-wide limit holds due jobs back, how often to look for a freed slot besides
    /// the wake-up a finished job's notification gives.
    public var heldBackPollInterval: Duration
    /// How old a kind's claim frontier may get before a claim starts at the claim index's start
    /// again (`ClaimFrontier`): the longest a job that became due behind the frontier waits,
    /// besides the next wake. Zero: every claim starts at the start.
    public var claimRestartInterval: Duration

    public init(
        concurrency: [JobKind: Int], queues: [String]? = nil, lease: Duration = .seconds(30),
        pollInterval: Duration = .seconds(1), shutdownGrace: Duration = .seconds(25),
        retry: RetryPolicy = RetryPolicy(), maxClaimBatch: Int = 1_000, heldBackPollInterval: Duration = .milliseconds(100),
        claimRestartInterval: Duration = .seconds(1)
    ) {
        self.heldBackPollInterval = heldBackPollInterval
        self.claimRestartInterval = claimRestartInterval
        self.concurrency = concurrency
        self.queues = queues
        self.lease = lease
        self.pollInterval = pollInterval
        self.shutdownGrace = shutdownGrace
        self.retry = retry
        self.maxClaimBatch = maxClaimBatch
    }
}

extension EnvironmentReader {
    /// `kind=limit,kind=limit`, each kind one of `kinds`, the kinds this process runs.
    public func concurrency(_ name: String, runs kinds: Set<JobKind>) throws -> [JobKind: Int] {
        var limits: [JobKind: Int] = [:]
        for item in try list(name) ?? [] {
            let parts = item.split(separator: "=", omittingEmptySubsequences: false)
            guard parts.count == 2, let limit = Int(parts[1]), (1...10_000).contains(limit) else {
                throw ConfigurationError(variable: name, reason: "'\(item)' is not kind=limit with a limit in 1...10000")
            }
            let kind = JobKind(rawValue: String(parts[0]))
            guard kinds.contains(kind) else {
                let runs = kinds.sorted().map(\.rawValue).joined(separator: ", ")
                throw ConfigurationError(variable: name, reason: "'\(kind)' is not a kind this process runs (\(runs))")
            }
            limits[kind] = limit
        }
        return limits
    }
}
