/// Why a running job was interrupted, which decides what its end records.
enum JobDisposition: Sendable, Equatable {
    case normal, cancelRequested, leaseLost, shutdown
}

/// A worker's bookkeeping as a value (postgres-nio's `ListenStateMachine`): its slots per kind,
/// the claim in flight, the jobs it runs and why each was interrupted, whether more work is
/// likely waiting, and whether it is stopping. Its methods take what happened (a wake, a claim's
/// jobs, a job's end, a lost lease, a cancel, the shutdown) and return what to do (claim these
/// slots, start or hand back these jobs, cancel these tasks). It does no I/O and makes no task:
/// `WorkerRuntime` keeps it in its one `Mutex` and performs what it asks. `Handle` is what cancels
/// a job's run (the runtime's `Task`).
///
/// Every slot of a kind is in exactly one place: free, reserved by the claim in flight, or held
/// by a job here (its current attempt, or an earlier one claimed again while it still ran, until
/// that run ends). So no slot counts twice and none goes below zero, whatever the claim returns.
struct WorkerState<Handle> {
    /// What `claimed` asks of the runtime.
    enum Action {
        /// Run it, then report its handle with `started`.
        case start(ClaimedJob)
        /// Stop this run (its job was claimed again: its lease is gone).
        case cancel(Handle)
        /// Give it back to the queue at once, unrun (its attempt not counted): the worker is
        /// stopping, or the claim returned more than it asked for.
        case handBack(ClaimedJob)
    }

    /// What to do when woken to claim.
    enum Claim: Equatable {
        /// Claim up to these many jobs per kind; report with `claimed`, then `claimEnded`.
        case claim([JobKind: Int])
        /// Every slot is taken.
        case noFreeSlot
        /// The worker is stopping: claim no more.
        case stop
    }

    /// What a job's run must do as it ends.
    enum Ending: Equatable {
        /// Record its outcome as `JobDisposition` says, then report `ended`.
        case record(JobDisposition)
        /// It was claimed again while it ran: it records nothing; its slot is free again, and
        /// `claimAgain` says whether to look for more work.
        case lost(claimAgain: Bool)
        /// The shutdown handed it back already: nothing to record.
        case handedBack
    }

    private struct Running {
        let job: ClaimedJob
        /// Nil until the runtime reported it (`started`).
        var handle: Handle?
        var disposition = JobDisposition.normal
        /// Its outcome is being recorded; nothing else may record one.
        var finishing = false
    }

    private struct AttemptKey: Hashable {
        let id: Int64
        let attempt: Int

        init(_ job: ClaimedJob) {
            id = job.id
            attempt = job.attempt
        }
    }

    private struct InFlight {
        let requested: [JobKind: Int]
        /// The requested slots no returned job took yet.
        var reserved: [JobKind: Int]
        /// Some statement of the claim returned.
        var answered = false
    }

    /// Slots per kind, as configured.
    let capacity: [JobKind: Int]
    private let limitedKinds: Set<JobKind>
    private let maxClaimBatch: Int
    /// Slots per kind nothing holds or reserves.
    private(set) var free: [JobKind: Int]
    private var inFlight: InFlight?
    /// By job id: the attempt this worker holds.
    private var running: [Int64: Running] = [:]
    /// Earlier attempts of jobs this worker claimed again while they still ran here: taken back
    /// while it lived (its LISTEN session dropped and the reaper took its jobs, `WorkerLock`; or
    /// a lease it could not renew in time). Interrupted as lost; they record nothing but hold
    /// their slot until their run ends.
    private var superseded: [AttemptKey: Running] = [:]
    /// Jobs the shutdown handed back while their handlers ignored cancellation.
    private var abandoned: Set<Int64> = []
    /// More due jobs are likely waiting: a freed slot should trigger a claim.
    private(set) var backlog = true
    /// A fleet-wide limit left due jobs waiting: a slot freed anywhere should trigger a claim.
    private(set) var heldBack = false
    private(set) var isStopping = false

    /// `concurrency`: slots per kind (at least one each); `limitedKinds`: the kinds whose claims
    /// a fleet-wide limit may hold back; a claim asks for at most `maxClaimBatch` jobs of a kind.
    init(concurrency: [JobKind: Int], limitedKinds: Set<JobKind>, maxClaimBatch: Int) {
        precondition(maxClaimBatch >= 1)
        capacity = concurrency.mapValues { max(1, $0) }
        free = capacity
        self.limitedKinds = limitedKinds
        self.maxClaimBatch = maxClaimBatch
    }

    // MARK: Claiming

    /// Jobs may be waiting (enqueued, rescued, a limit raised): a freed slot should trigger a claim.
    mutating func workMayBeWaiting() {
        backlog = true
    }

    /// Woken to claim: reserves the free slots (at most `maxClaimBatch` a kind) for the claim.
    mutating func claimBegins() -> Claim {
        guard !isStopping else { return .stop }
        precondition(inFlight == nil, "a claim began while another was in flight")
        let slots = free.filter { $0.value > 0 }.mapValues { min($0, maxClaimBatch) }
        guard !slots.isEmpty else { return .noFreeSlot }
        for (kind, count) in slots { free[kind, default: 0] -= count }
        inFlight = InFlight(requested: slots, reserved: slots)
        return .claim(slots)
    }

    /// One of the claim's statements returned `jobs`. The claim's first answer decides `backlog`
    /// anew (a kind that filled every slot asked for probably has more waiting); a later one can
    /// only add to it.
    mutating func claimed(_ jobs: [ClaimedJob]) -> [Action] {
        guard var claim = inFlight else { preconditionFailure("jobs claimed with no claim in flight") }
        var counts: [JobKind: Int] = [:]
        for job in jobs { counts[job.kind, default: 0] += 1 }
        let filled = claim.requested.contains { counts[$0.key, default: 0] == $0.value }
        backlog = filled || (claim.answered && backlog)
        claim.answered = true
        var actions: [Action] = []
        for job in jobs {
            guard claim.reserved[job.kind, default: 0] > 0 else {
                actions.append(.handBack(job))
                continue
            }
            claim.reserved[job.kind, default: 0] -= 1
            if var earlier = running.removeValue(forKey: job.id) {
                // Claimed again: the earlier attempt's lease is gone for sure.
                earlier.disposition = .leaseLost
                superseded[AttemptKey(earlier.job)] = earlier
                if let handle = earlier.handle { actions.append(.cancel(handle)) }
            }
            if isStopping {
                // Its slot goes back with the claim's unused ones.
                claim.reserved[job.kind, default: 0] += 1
                actions.append(.handBack(job))
            } else {
                running[job.id] = Running(job: job)
                actions.append(.start(job))
            }
        }
        inFlight = claim
        return actions
    }

    /// The claim ended; `heldBack`: the kinds a limit held back, nil when it failed. Its unused
    /// slots are free again.
    mutating func claimEnded(heldBack: Set<JobKind>?) {
        guard let claim = inFlight else { preconditionFailure("a claim ended that never began") }
        inFlight = nil
        for (kind, count) in claim.reserved { free[kind, default: 0] += count }
        guard let heldBack else { return }
        if !claim.answered { backlog = false }
        // A limit left due jobs waiting: claim again when a slot may have freed.
        if claim.requested.keys.contains(where: limitedKinds.contains) { self.heldBack = !heldBack.isEmpty }
    }

    /// The run of `job` (an action's `.start`) is `handle`; returns it when it must stop at once:
    /// it was interrupted, or claimed again, before it started.
    mutating func started(_ job: ClaimedJob, _ handle: Handle) -> Handle? {
        if let entry = running[job.id], entry.job.attempt == job.attempt {
            running[job.id]?.handle = handle
            return entry.disposition == .normal ? nil : handle
        }
        let key = AttemptKey(job)
        guard superseded[key] != nil else { return nil }
        superseded[key]?.handle = handle
        return handle
    }

    // MARK: Running

    /// A job's handler returned or threw: what its run must do about it.
    mutating func ending(_ job: ClaimedJob) -> Ending {
        if superseded.removeValue(forKey: AttemptKey(job)) != nil {
            free[job.kind, default: 0] += 1
            return .lost(claimAgain: backlog)
        }
        guard let entry = running[job.id], entry.job.attempt == job.attempt, !entry.finishing else { return .handedBack }
        running[job.id]?.finishing = true
        return .record(entry.disposition)
    }

    /// A job's outcome is queued for writing (after `.record`): its slot is free again. Returns
    /// whether to look for more work.
    mutating func ended(_ job: ClaimedJob) -> Bool {
        if let entry = running[job.id], entry.job.attempt == job.attempt {
            running[job.id] = nil
        } else if superseded.removeValue(forKey: AttemptKey(job)) == nil {
            // Not here (anymore): no slot to free.
            return false
        }
        // Claimed again while its outcome was recorded (then refused by the compare-and-set),
        // it waited among the superseded.
        free[job.kind, default: 0] += 1
        return backlog
    }

    // MARK: Leases and cancellation

    /// The jobs running here: those whose leases the heartbeat renews.
    var runningIDs: [Int64] { Array(running.keys) }

    /// Interrupts the running job `id` for `disposition`; returns the handle to cancel (nil: not
    /// running here, interrupted already, or not started yet, which `started` then stops).
    mutating func interrupt(_ id: Int64, as disposition: JobDisposition) -> Handle? {
        guard let entry = running[id], entry.disposition == .normal else { return nil }
        running[id]?.disposition = disposition
        return entry.handle
    }

    /// A heartbeat renewed the leases of `asked`: those it did not keep are lost, and someone
    /// asked to cancel `cancelRequested`. Returns the handles to cancel.
    mutating func leasesRenewed(asked: [Int64], kept: Set<Int64>, cancelRequested: Set<Int64>) -> [Handle] {
        let lost = asked.filter { !kept.contains($0) }.compactMap { interrupt($0, as: .leaseLost) }
        return lost + cancelRequested.sorted().compactMap { interrupt($0, as: .cancelRequested) }
    }

    // MARK: Shutdown

    /// The shutdown began: no claim from now on, and a claim in flight hands its jobs back.
    mutating func stop() {
        isStopping = true
    }

    var runningCount: Int { running.count }

    /// The slots of `kind` held by jobs here or reserved by the claim in flight.
    func slotsInUse(of kind: JobKind) -> Int {
        (inFlight?.reserved[kind] ?? 0) + running.values.filter { $0.job.kind == kind }.count
            + superseded.values.filter { $0.job.kind == kind }.count
    }

    /// Nothing runs here and no claim is in flight: a drain may end.
    var isDrained: Bool { running.isEmpty && inFlight == nil }

    /// The grace period is over: every running job is interrupted, to be handed back. Returns the
    /// handles to cancel.
    mutating func graceEnded() -> [Handle] {
        running.keys.sorted().compactMap { interrupt($0, as: .shutdown) }
    }

    /// The jobs whose handlers ignored cancellation past the wind-down: handed back by the
    /// runtime now; their runs record nothing when they end.
    mutating func abandonStuck() -> [ClaimedJob] {
        let stuck = running.values.filter { !$0.finishing }.map(\.job).sorted { $0.id < $1.id }
        for job in stuck {
            running[job.id]?.finishing = true
            abandoned.insert(job.id)
        }
        return stuck
    }

    /// Every job left running here was abandoned: every other outcome is queued.
    var onlyAbandonedLeft: Bool { running.keys.allSatisfy(abandoned.contains) }
}

extension WorkerState.Action: Equatable where Handle: Equatable {}
