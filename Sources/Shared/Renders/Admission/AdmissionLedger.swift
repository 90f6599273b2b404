import FleetQueue
import FleetSupport

/// What render admission reads at once (`RenderAdmission.read`): the render settings, and for
/// their provider its rule and load, its renders in flight, its recent run time, the input kinds'
/// recent run times, and which of the kinds a render runs an operator paused.
public struct AdmissionEstimate: Sendable, Equatable {
    public var settings: RenderSettings
    public var load: LimitLoad
    /// The provider's recent run time (nil: none on record yet; its assumed latency then).
    public var latency: Duration?
    /// The input jobs' recent run times (`RenderInputs.expectedWait`).
    public var inputRunTimes: [JobKind: Duration]
    /// Of `render.run` and its input kinds, those paused (`dispatcher pause`, by kind or by their
    /// queue): a render needing one would wait out its deadline in the queue.
    public var pausedKinds: Set<JobKind>
    /// The provider's running and resumed renders' ages and deadlines: when their slots free.
    public var inFlight: RendersInFlight

    public init(
        settings: RenderSettings, load: LimitLoad, latency: Duration?, inputRunTimes: [JobKind: Duration], pausedKinds: Set<JobKind> = [],
        inFlight: RendersInFlight = RendersInFlight()
    ) {
        self.settings = settings
        self.load = load
        self.latency = latency
        self.inputRunTimes = inputRunTimes
        self.pausedKinds = pausedKinds
        self.inFlight = inFlight
    }
}

/// Render admission between two reads of the provider's load, as a value (no I/O): the estimate
/// last read, the renders this process admitted that it may not show yet, and the requests
/// waiting for a read.
///
/// A render admitted here counts among the renders ahead of the next one from the decision on:
/// until its transaction ends (no read can see it before), then until a read that started after
/// its commit replaces the estimate. So one process's concurrent requests count each other as
/// the per-request lock did; what other dispatchers admitted shows at the next read.
struct AdmissionLedger<Waiter> {
    /// The order and start of one read, handed back when it ends.
    struct Read: Equatable {
        let number: Int
        let startedAt: ContinuousClock.Instant
        /// Commits of admitted renders before it started: those after may be missing from it.
        let commitsBefore: Int
    }

    /// What a request gets from `lookUp`.
    enum LookUp {
        /// Fresh enough: decide on it.
        case estimate(AdmissionEstimate)
        /// None fresh enough: the waiter is answered by the next read.
        case wait
        /// The service stopped: nothing is admitted any more.
        case stopped
    }

    /// What `admit` decided.
    enum Decision: Equatable {
        /// `counted`: a rule limits the provider, so the render counts among those ahead
        /// until `ended` and a read after.
        case admitted(counted: Bool)
        case refused(retryAfterSeconds: Int)
        /// A kind the render needs is paused: it would only time out.
        case paused(kinds: [JobKind], retryAfterSeconds: Int)
    }

    private(set) var estimate: AdmissionEstimate?
    /// When the current estimate's read started.
    private var readAt: ContinuousClock.Instant?
    /// What reads started before this may have missed: a limit changed through this process.
    private var changedAt: ContinuousClock.Instant?
    private var readsStarted = 0
    private var commitsBeforeRead = 0
    /// Admitted (counted) renders whose transaction has not ended.
    private(set) var uncommitted = 0
    /// Admitted (counted) renders committed, ever.
    private var commits = 0
    /// Each waiter with the number of reads started when it arrived: a read started after
    /// answers it.
    private var waiters: [(readsStarted: Int, waiter: Waiter)] = []
    /// A request asked since the last read started: the service reads again after its pause.
    private(set) var demanded = false
    private(set) var stopped = false

    /// Renders this process admitted that the estimate may not count.
    var unseen: Int { uncommitted + commits - commitsBeforeRead }

    /// The estimate when read less than `maxAge` ago; else `waiter` waits for the next read.
    /// `signal`: whether the service must be told there is demand (once per read).
    mutating func lookUp(now: ContinuousClock.Instant, maxAge: Duration, waiter: Waiter) -> (LookUp, signal: Bool) {
        guard !stopped else { return (.stopped, false) }
        let signal = !demanded
        demanded = true
        if let estimate, let readAt, now - readAt <= maxAge, changedAt.map({ readAt > $0 }) ?? true {
            return (.estimate(estimate), signal)
        }
        waiters.append((readsStarted, waiter))
        return (.wait, signal)
    }

    /// Something the estimate reads changed at `now`: a request from now on waits for a read
    /// started after it.
    mutating func changed(at now: ContinuousClock.Instant) {
        changedAt = now
    }

    mutating func readStarted(at now: ContinuousClock.Instant) -> Read {
        readsStarted += 1
        demanded = false
        return Read(number: readsStarted, startedAt: now, commitsBefore: commits)
    }

    /// The new estimate; returns the waiters it answers (those that arrived before it started).
    mutating func readEnded(_ read: Read, with estimate: AdmissionEstimate) -> [Waiter] {
        self.estimate = estimate
        readAt = read.startedAt
        commitsBeforeRead = read.commitsBefore
        return takeWaiters(before: read)
    }

    /// The read failed: the estimate stays; the waiters it would have answered get the error.
    mutating func readFailed(_ read: Read) -> [Waiter] {
        takeWaiters(before: read)
    }

    private mutating func takeWaiters(before read: Read) -> [Waiter] {
        let answered = waiters.filter { $0.readsStarted < read.number }.map(\.waiter)
        waiters.removeAll { $0.readsStarted < read.number }
        return answered
    }

    /// Whether a render asked now would start in time on the current estimate, counting the
    /// renders admitted here that it does not show (`RenderCapacity.retryAfter`). `inputWait`:
    /// how long its photos are expected to take to be made; `needs`: the kinds it runs (its own
    /// and its inputs'), refused at once when one is paused.
    mutating func admit(inputWait: Duration, deadline: Duration, needs: Set<JobKind> = [.renderRun]) -> Decision {
        guard let estimate else { return .admitted(counted: false) }
        if let refusal = pausedRefusal(needs: needs, deadline: deadline) { return refusal }
        if let retryAfter = refusal(inputWait: inputWait, deadline: deadline, ahead: unseen) {
            return .refused(retryAfterSeconds: retryAfter)
        }
        let counted = estimate.load.rule != nil
        if counted { uncommitted += 1 }
        return .admitted(counted: counted)
    }

    /// Whether a render admitted with a shorter wait for its inputs must be refused after all,
    /// `inputWait` found once its transaction saw what still makes the photos it names by id:
    /// the test `admit` made, with the render itself no longer counted among those ahead.
    func readmits(inputWait: Duration, deadline: Duration, counted: Bool) -> Int? {
        refusal(inputWait: inputWait, deadline: deadline, ahead: unseen - (counted ? 1 : 0))
    }

    /// `.paused` when one of `needs` is paused on the current estimate. A pause has no known end:
    /// the caller is told to come back after one render's deadline.
    func pausedRefusal(needs: Set<JobKind>, deadline: Duration) -> Decision? {
        let paused = needs.intersection(estimate?.pausedKinds ?? []).sorted { $0.rawValue < $1.rawValue }
        return paused.isEmpty ? nil : .paused(kinds: paused, retryAfterSeconds: max(1, Int(deadline.seconds.rounded(.up))))
    }

    private func refusal(inputWait: Duration, deadline: Duration, ahead unseen: Int) -> Int? {
        guard let estimate else { return nil }
        let load = estimate.load
        let ahead = LimitLoad(rule: load.rule, running: load.running, waiting: load.waiting + unseen, startedInWindow: load.startedInWindow)
        let latency = estimate.latency ?? RenderCapacity.assumedLatency(estimate.settings.provider)
        return RenderCapacity.retryAfter(load: ahead, inFlight: estimate.inFlight, latency: latency, inputWait: inputWait, deadline: deadline)
    }

    /// An admitted render's transaction ended: `committed`, it stays counted until a read after.
    mutating func ended(counted: Bool, committed: Bool) {
        guard counted else { return }
        uncommitted -= 1
        if committed { commits += 1 }
    }

    /// The service stopped: the waiters left, to be refused.
    mutating func stop() -> [Waiter] {
        stopped = true
        defer { waiters = [] }
        return waiters.map(\.waiter)
    }
}
