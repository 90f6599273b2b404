import FleetSupport
import Synchronization

/// Where a worker's claims of one kind start in `jobs_claim_idx` (`(kind, priority, run_at, id)`
/// of the available jobs): past the jobs its earlier claims took, or at the index's start.
///
/// Every claimed job leaves a dead entry at the index's low end. Normally the first claim to
/// visit it marks it dead (LP_DEAD) and later scans skip it for free, but while any session holds
/// an older snapshot no entry may be marked, vacuumed or deleted bottom-up, so a claim from the
/// start visits the heap for every job claimed since that snapshot began (90,000 visits a minute
/// of the hold at 1,500 jobs/s). A claim past the frontier seeks straight to it and walks only the
/// entries of the last `lag`, so its cost no longer grows with the hold.
///
/// Jobs that become due behind the frontier (a higher priority, a run-at older than `lag` that
/// committed late, a job a paused queue or a lock kept back) are found by a claim from the start,
/// which the worker makes when the frontier is older than `restartEvery`: a job behind it waits at
/// most that long plus the worker's next wake (`docs/reliability.md`, "Held snapshot").
///
/// That restart walks every dead entry again: 0.47 s with 540,000 of them, the entries of a
/// six-minute hold at 1,500 jobs/s, made by each worker every second at first. So the next restart
/// comes no sooner than `restartCostFactor` times the last one took: restarts take at most 2 % of a
/// claiming worker's time whatever the hold's age, and a job behind the frontier waits longer
/// only while restarts are slow (50 × 0.47 s, 24 s, in that example; 1 s without a hold, where a
/// restart takes a millisecond).
public struct ClaimFrontier: Sendable, Equatable {
    /// The claim's lower bound in the index's order: it takes jobs with
    /// `(priority, run_at) >= (priority, runAt)`. `runAt` is in seconds since 1970.
    public struct Seek: Sendable, Equatable {
        public var priority: Int
        public var runAt: Double

        public init(priority: Int, runAt: Double) {
            self.priority = priority
            self.runAt = runAt
        }

        /// Every job: below any priority (0...9) and any run-at.
        public static let start = Seek(priority: -1, runAt: -.infinity)
    }

    /// How far behind the newest claimed job's run-at the next claim starts: an enqueue's run-at is
    /// its transaction's start, so a job that committed after a later one had been claimed still
    /// lies in reach of the next claim. Costs a walk over the last second's claimed entries (a
    /// 1,500 jobs/s load: 1,500 heap visits, under a millisecond) only while a snapshot is held.
    public static let lag = 1.0

    /// The next restart waits at least this many times as long as the last one took.
    public static let restartCostFactor = 50.0

    /// The last claimed `(priority, run_at)` in index order, nil before the first claim that took a job.
    public private(set) var last: Seek?
    /// When the last claim from the start ended, by the worker's clock (seconds); nil: never.
    public private(set) var restartedAt: Double?
    /// How long the last claim from the start took (seconds).
    public private(set) var restartCost = 0.0

    public init() {}

    /// Where the claim at `now` starts: at the index's start when no job was claimed yet, when
    /// `restartEvery` is 0, or when the last restart is `restartEvery` old or older (and
    /// `restartCostFactor` times its cost), else `lag` before the last claimed job.
    public func seek(now: Double, restartEvery: Double) -> Seek {
        guard restartEvery > 0, let last, let restartedAt,
              now - restartedAt < max(restartEvery, Self.restartCostFactor * restartCost) else {
            return .start
        }
        return Seek(priority: last.priority, runAt: last.runAt - Self.lag)
    }

    /// Records a claim that started at `from` at `startedAt`, ended at `now`, and took jobs up to
    /// `newest` (the greatest `(priority, run_at)` it took; nil: none). A claim that took nothing
    /// keeps the frontier: jobs arriving later land past it, and dropping it would send the next
    /// claim back over every dead entry.
    public mutating func claimed(from: Seek, newest: Seek?, startedAt: Double, now: Double) {
        if from == .start {
            restartedAt = now
            restartCost = max(0, now - startedAt)
            if let newest { last = newest }
        } else if let newest, last.map({ newest.isPast($0) }) ?? true {
            last = newest
        }
    }
}

extension ClaimFrontier.Seek {
    /// Whether this key comes after `other` in the claim index's order.
    func isPast(_ other: Self) -> Bool {
        (priority, runAt) > (other.priority, other.runAt)
    }
}

/// A worker's frontiers, one per kind, shared by its claims (one claim runs at a time, but the
/// type is safe across tasks). `restartEvery` 0 makes every claim start at the index's start.
public final class ClaimFrontiers: Sendable {
    public let restartEvery: Duration
    private let frontiers = Mutex<[JobKind: ClaimFrontier]>([:])
    private let clock: @Sendable () -> Double

    public init(restartEvery: Duration, clock: @escaping @Sendable () -> Double = ClaimFrontiers.monotonicSeconds) {
        self.restartEvery = restartEvery
        self.clock = clock
    }

    /// Seconds on the continuous clock: a frontier's age never jumps with the wall clock.
    public static func monotonicSeconds() -> Double {
        let elapsed = ContinuousClock.now - Self.origin
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }

    private static let origin = ContinuousClock.now

    /// Where this claim starts, per kind, and when (by the frontiers' clock).
    func seeks(for kinds: [JobKind]) -> (seeks: [ClaimFrontier.Seek], at: Double) {
        let now = clock(), every = restartEvery.seconds
        let seeks = frontiers.withLock { frontiers in
            kinds.map { frontiers[$0, default: ClaimFrontier()].seek(now: now, restartEvery: every) }
        }
        return (seeks, now)
    }

    /// Records what the claim that started at `seeks` at `startedAt` took, per kind.
    func claimed(_ kinds: [JobKind], from seeks: [ClaimFrontier.Seek], startedAt: Double, newest: [JobKind: ClaimFrontier.Seek]) {
        let now = clock()
        frontiers.withLock { frontiers in
            for (kind, seek) in zip(kinds, seeks) {
                frontiers[kind, default: ClaimFrontier()].claimed(from: seek, newest: newest[kind], startedAt: startedAt, now: now)
            }
        }
    }

    /// The frontier of `kind` (for tests and metrics).
    public func frontier(of kind: JobKind) -> ClaimFrontier? {
        frontiers.withLock { $0[kind] }
    }
}
