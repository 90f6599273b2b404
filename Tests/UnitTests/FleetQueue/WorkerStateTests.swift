@testable import FleetQueue
@testable import FleetTestSupport
import Foundation
import Testing

/// The worker's bookkeeping without a database or a task: what it asks the runtime to do as
/// claims return, jobs end, leases are lost, cancels come and the worker stops. A run's handle is
/// a number here.
@Suite struct WorkerStateTests {
    private typealias State = WorkerState<Int>

    private func job(_ id: Int64, _ kind: JobKind = .drillNoop, attempt: Int = 1) -> ClaimedJob {
        ClaimedJob(id: id, kind: kind, queue: "default", priority: 2, attempt: attempt, maxAttempts: 5, payload: "{}",
                   createdAt: Date(timeIntervalSince1970: 0))
    }

    private func fresh(_ concurrency: [JobKind: Int] = [.drillNoop: 3], limited: Set<JobKind> = [], batch: Int = 100) -> State {
        State(concurrency: concurrency, limitedKinds: limited, maxClaimBatch: batch)
    }

    /// Claims `jobs` in one statement and starts each with its id as its handle.
    private func claim(_ jobs: [ClaimedJob], into state: inout State, heldBack: Set<JobKind> = []) {
        guard case .claim = state.claimBegins() else { Issue.record("no claim"); return }
        for action in state.claimed(jobs) {
            if case .start(let job) = action {
                let stopNow = state.started(job, Int(job.id))
                #expect(stopNow == nil)
            }
        }
        state.claimEnded(heldBack: heldBack)
    }

    /// Every slot is free, reserved or held, and none below zero.
    private func expectSlotsAccounted(_ state: State, sourceLocation: SourceLocation = #_sourceLocation) {
        for (kind, capacity) in state.capacity {
            let free = state.free[kind, default: 0]
            #expect(free >= 0, "\(kind): \(free) free", sourceLocation: sourceLocation)
            #expect(free + state.slotsInUse(of: kind) == capacity, "\(kind)", sourceLocation: sourceLocation)
        }
    }

    // MARK: Claiming

    @Test func aClaimReservesTheFreeSlotsUpToTheBatchAndGivesBackWhatItDidNotUse() {
        var state = fresh([.drillNoop: 3, .drillScript: 10], batch: 4)
        #expect(state.capacity == [.drillNoop: 3, .drillScript: 10])
        let asked = state.claimBegins()
        #expect(asked == .claim([.drillNoop: 3, .drillScript: 4]))
        #expect(state.free == [.drillNoop: 0, .drillScript: 6])
        expectSlotsAccounted(state)
        let actions = state.claimed([job(1), job(2, .drillScript)])
        #expect(actions == [.start(job(1)), .start(job(2, .drillScript))])
        expectSlotsAccounted(state)
        state.claimEnded(heldBack: [])
        #expect(state.free == [.drillNoop: 2, .drillScript: 9])
        #expect(Set(state.runningIDs) == [1, 2])
        expectSlotsAccounted(state)
    }

    @Test func aKindWithNoFreeSlotIsNotClaimedAndNoneAtAllClaimsNothing() {
        var state = fresh([.drillNoop: 2, .drillScript: 1])
        claim([job(1, .drillScript)], into: &state)
        let asked = state.claimBegins()
        #expect(asked == .claim([.drillNoop: 2]))
        _ = state.claimed([job(2), job(3)])
        state.claimEnded(heldBack: [])
        let asked2 = state.claimBegins()
        #expect(asked2 == .noFreeSlot)
        // Nothing reserved: ending a job frees its slot for the next claim.
        let ending = state.ending(job(3))
        #expect(ending == .record(.normal))
        _ = state.ended(job(3))
        let asked3 = state.claimBegins()
        #expect(asked3 == .claim([.drillNoop: 1]))
    }

    @Test func aZeroOrMissingConcurrencyStillGivesOneSlot() {
        var state = fresh([.drillNoop: 0])
        let asked = state.claimBegins()
        #expect(asked == .claim([.drillNoop: 1]))
    }

    /// A kind that filled every slot asked for probably has more waiting: a freed slot claims again.
    @Test func theClaimsFirstAnswerDecidesTheBacklogAndLaterOnesOnlyAddToIt() {
        var state = fresh([.drillNoop: 2, .drillScript: 2])
        #expect(state.backlog)
        _ = state.claimBegins()
        _ = state.claimed([job(1)])
        #expect(!state.backlog, "the first answer filled no kind")
        _ = state.claimed([job(2, .drillScript), job(3, .drillScript)])
        #expect(state.backlog, "a later answer filled a kind")
        _ = state.claimed([])
        #expect(state.backlog, "a later answer does not take it back")
        state.claimEnded(heldBack: [])
        #expect(state.backlog)

        _ = state.ending(job(1))
        let claimAgain = state.ended(job(1))
        #expect(claimAgain, "a freed slot claims again while there is a backlog")
        _ = state.claimBegins()
        state.claimEnded(heldBack: [])
        #expect(!state.backlog, "a claim no statement answered found nothing")
        _ = state.ending(job(2, .drillScript))
        let claimAgain2 = state.ended(job(2, .drillScript))
        #expect(!claimAgain2)
        state.workMayBeWaiting()
        #expect(state.backlog)
    }

    @Test func aFailedClaimLeavesTheBacklogAndTheLimitsAsTheyWere() {
        var state = fresh([.drillNoop: 2], limited: [.drillNoop])
        claim([], into: &state, heldBack: [.drillNoop])
        #expect(!state.backlog && state.heldBack)
        _ = state.claimBegins()
        state.claimEnded(heldBack: nil)
        #expect(!state.backlog && state.heldBack)
        #expect(state.free == [.drillNoop: 2])
    }

    @Test func onlyAClaimOfALimitedKindSaysWhetherALimitHoldsJobsBack() {
        var state = fresh([.drillNoop: 1, .drillScript: 1], limited: [.drillScript])
        claim([], into: &state, heldBack: [.drillScript])
        #expect(state.heldBack)
        claim([job(1, .drillScript)], into: &state)
        #expect(!state.heldBack)
        claim([], into: &state, heldBack: [.drillScript])
        #expect(!state.heldBack, "a claim of unlimited kinds only (the limited one's slot is taken) leaves it")
    }

    @Test func aClaimThatReturnsMoreThanItAskedForHandsTheRestBack() {
        var state = fresh([.drillNoop: 1])
        let asked = state.claimBegins()
        #expect(asked == .claim([.drillNoop: 1]))
        let actions = state.claimed([job(1), job(2)])
        #expect(actions == [.start(job(1)), .handBack(job(2))])
        let actions2 = state.claimed([job(3, .drillScript)])
        #expect(actions2 == [.handBack(job(3, .drillScript))], "a kind it did not ask for")
        state.claimEnded(heldBack: [])
        #expect(state.free == [.drillNoop: 0])
        #expect(state.runningIDs == [1])
        expectSlotsAccounted(state)
    }

    // MARK: Starting, interrupting, ending

    @Test func aJobEndsByRecordingItsOutcomeThenFreeingItsSlot() {
        var state = fresh()
        claim([job(1)], into: &state)
        let ending = state.ending(job(1))
        #expect(ending == .record(.normal))
        // Held while its outcome is recorded: a drain waits for it, the heartbeat renews it.
        #expect(state.runningIDs == [1] && state.free[.drillNoop] == 2)
        let ending2 = state.ending(job(1))
        #expect(ending2 == .handedBack, "one outcome per attempt")
        state.workMayBeWaiting()
        let claimAgain = state.ended(job(1))
        #expect(claimAgain, "a freed slot claims again while there is a backlog")
        #expect(state.runningIDs.isEmpty && state.free[.drillNoop] == 3)
        let claimAgain2 = state.ended(job(1))
        #expect(!claimAgain2, "a second end frees nothing")
        #expect(state.free[.drillNoop] == 3)
        expectSlotsAccounted(state)
    }

    @Test func aCancelForAJobNotYetStartedStopsItAsItStarts() {
        var state = fresh()
        _ = state.claimBegins()
        let actions = state.claimed([job(1), job(2)])
        #expect(actions == [.start(job(1)), .start(job(2))])
        let cancel = state.interrupt(1, as: .cancelRequested)
        #expect(cancel == nil, "no run to cancel yet")
        let stopNow = state.started(job(1), 10)
        #expect(stopNow == 10, "stopped as soon as it starts")
        let stopNow2 = state.started(job(2), 20)
        #expect(stopNow2 == nil)
        state.claimEnded(heldBack: [])
        let ending = state.ending(job(1))
        #expect(ending == .record(.cancelRequested))
        let ending2 = state.ending(job(2))
        #expect(ending2 == .record(.normal))
    }

    @Test func aRunningJobIsInterruptedOnceForTheFirstReason() {
        var state = fresh()
        claim([job(1)], into: &state)
        let cancel = state.interrupt(1, as: .cancelRequested)
        #expect(cancel == 1)
        let cancel2 = state.interrupt(1, as: .leaseLost)
        #expect(cancel2 == nil)
        let cancel3 = state.interrupt(9, as: .cancelRequested)
        #expect(cancel3 == nil, "not running here")
        let ending = state.ending(job(1))
        #expect(ending == .record(.cancelRequested))
    }

    @Test func theHeartbeatStopsTheJobsItLostAndThoseSomeoneCancels() {
        var state = fresh([.drillNoop: 4])
        claim([job(1), job(2), job(3)], into: &state)
        // Job 4 started after the heartbeat asked: not lost for not being renewed.
        claim([job(4)], into: &state)
        let cancelled = state.leasesRenewed(asked: [1, 2, 3], kept: [1, 3], cancelRequested: [3])
        #expect(cancelled == [2, 3])
        let ending = state.ending(job(1))
        #expect(ending == .record(.normal))
        let ending2 = state.ending(job(2))
        #expect(ending2 == .record(.leaseLost))
        let ending3 = state.ending(job(3))
        #expect(ending3 == .record(.cancelRequested))
        let ending4 = state.ending(job(4))
        #expect(ending4 == .record(.normal))
    }

    /// Taken back while it lived (its session dropped, the reaper took its jobs) and claimed
    /// again: the earlier attempt is stopped and records nothing; each holds its slot until its
    /// run ends.
    @Test func aJobClaimedAgainWhileItRunsStopsItsEarlierAttempt() {
        var state = fresh([.drillNoop: 2])
        claim([job(1)], into: &state)
        _ = state.claimBegins()
        let actions = state.claimed([job(1, attempt: 2)])
        #expect(actions == [.cancel(1), .start(job(1, attempt: 2))])
        let stopNow = state.started(job(1, attempt: 2), 12)
        #expect(stopNow == nil)
        state.claimEnded(heldBack: [])
        #expect(state.free[.drillNoop] == 0)
        expectSlotsAccounted(state)
        let cancel = state.interrupt(1, as: .cancelRequested)
        #expect(cancel == 12, "a cancel reaches the current attempt")
        // The second claim filled the slot it asked for: more are likely waiting.
        let ending = state.ending(job(1))
        #expect(ending == .lost(claimAgain: true))
        #expect(state.free[.drillNoop] == 1)
        let ending2 = state.ending(job(1, attempt: 2))
        #expect(ending2 == .record(.cancelRequested))
        let claimAgain = state.ended(job(1, attempt: 2))
        #expect(claimAgain)
        #expect(state.free[.drillNoop] == 2 && state.isDrained)
    }

    /// Claimed again while its outcome was being recorded (which the compare-and-set then
    /// refuses): its end frees the earlier attempt's slot, not the new one's.
    @Test func anAttemptClaimedAgainWhileItsOutcomeIsRecordedFreesItsOwnSlot() {
        var state = fresh([.drillNoop: 2])
        claim([job(1)], into: &state)
        let ending = state.ending(job(1))
        #expect(ending == .record(.normal))
        _ = state.claimBegins()
        let actions = state.claimed([job(1, attempt: 2)])
        #expect(actions == [.cancel(1), .start(job(1, attempt: 2))])
        state.claimEnded(heldBack: [])
        _ = state.ended(job(1))
        #expect(state.runningIDs == [1] && state.free[.drillNoop] == 1)
        let ending2 = state.ending(job(1, attempt: 2))
        #expect(ending2 == .record(.normal))
        expectSlotsAccounted(state)
    }

    @Test func anEarlierAttemptClaimedAgainBeforeItStartedIsStoppedAsItStarts() {
        var state = fresh([.drillNoop: 2])
        _ = state.claimBegins()
        let actions = state.claimed([job(1)])
        #expect(actions == [.start(job(1))])
        let actions2 = state.claimed([job(1, attempt: 2)])
        #expect(actions2 == [.start(job(1, attempt: 2))])
        let stopNow = state.started(job(1), 1)
        #expect(stopNow == 1)
        let stopNow2 = state.started(job(1, attempt: 2), 2)
        #expect(stopNow2 == nil)
        state.claimEnded(heldBack: [])
        let ending = state.ending(job(1))
        #expect(ending == .lost(claimAgain: false))
    }

    @Test func aRunThatEndedBeforeItsHandleCameIsNotStopped() {
        var state = fresh()
        _ = state.claimBegins()
        _ = state.claimed([job(1)])
        let ending = state.ending(job(1))
        #expect(ending == .record(.normal))
        _ = state.ended(job(1))
        let stopNow = state.started(job(1), 1)
        #expect(stopNow == nil)
        state.claimEnded(heldBack: [])
        expectSlotsAccounted(state)
    }

    // MARK: Stopping

    @Test func aStoppingWorkerClaimsNoMoreAndHandsBackWhatAClaimInFlightReturns() {
        var state = fresh([.drillNoop: 3])
        claim([job(1)], into: &state)
        let asked = state.claimBegins()
        #expect(asked == .claim([.drillNoop: 2]))
        state.stop()
        #expect(state.isStopping)
        // Claimed again while stopping: the earlier attempt stops, the new one goes back unrun.
        let actions = state.claimed([job(2), job(1, attempt: 2)])
        #expect(actions == [.handBack(job(2)), .cancel(1), .handBack(job(1, attempt: 2))])
        #expect(state.runningIDs.isEmpty)
        #expect(!state.isDrained, "the claim is still in flight")
        state.claimEnded(heldBack: [])
        #expect(state.isDrained)
        #expect(state.free[.drillNoop] == 2, "the earlier attempt holds its slot until its run ends")
        expectSlotsAccounted(state)
        let ending = state.ending(job(1))
        #expect(ending == .lost(claimAgain: true))
        #expect(state.free[.drillNoop] == 3)
        let asked2 = state.claimBegins()
        #expect(asked2 == .stop)
    }

    @Test func theDrainEndsOnlyOnceNothingRuns() {
        var state = fresh()
        claim([job(1), job(2)], into: &state)
        state.stop()
        #expect(!state.isDrained)
        let ending = state.ending(job(1))
        #expect(ending == .record(.normal))
        _ = state.ended(job(1))
        #expect(!state.isDrained)
        let ending2 = state.ending(job(2))
        #expect(ending2 == .record(.normal))
        #expect(!state.isDrained, "its outcome is not queued yet")
        _ = state.ended(job(2))
        #expect(state.isDrained)
    }

    /// Past the grace: every running job is interrupted to be handed back; those whose handlers
    /// ignore it are handed back by the runtime, and record nothing when they end.
    @Test func pastTheGraceJobsAreInterruptedThenTheStuckAbandoned() {
        var state = fresh([.drillNoop: 4])
        claim([job(1), job(2), job(3), job(4)], into: &state)
        let cancel = state.interrupt(4, as: .cancelRequested)
        #expect(cancel == 4)
        let ending = state.ending(job(3))
        #expect(ending == .record(.normal))
        state.stop()
        #expect(state.runningCount == 4)
        let interrupted = state.graceEnded()
        #expect(interrupted == [1, 2, 3], "job 4 was interrupted already")
        let ending2 = state.ending(job(1))
        #expect(ending2 == .record(.shutdown))
        _ = state.ended(job(1))
        let ending3 = state.ending(job(4))
        #expect(ending3 == .record(.cancelRequested))
        // Job 2 ignores cancellation; jobs 3 and 4 are recording their outcomes.
        let stuck = state.abandonStuck()
        #expect(stuck == [job(2)])
        #expect(!state.onlyAbandonedLeft)
        _ = state.ended(job(3))
        _ = state.ended(job(4))
        #expect(state.onlyAbandonedLeft && !state.isDrained)
        let ending4 = state.ending(job(2))
        #expect(ending4 == .handedBack)
    }

    // MARK: Slots

    /// Any order of claims, answers, ends, interrupts and re-claims keeps every slot accounted
    /// for and none below zero.
    @Test(arguments: 0..<20) func slotsAreNeverCountedTwiceNorBelowZero(seed: UInt64) {
        var random = SeededGenerator(seed: seed)
        var state = fresh([.drillNoop: 3, .drillScript: 2], limited: [.drillScript], batch: 2)
        var runs: [ClaimedJob] = []
        var attempts: [Int64: Int] = [:]
        var nextID: Int64 = 1
        for _ in 0..<300 {
            switch random.next() % 6 {
            case 0, 1:
                guard case .claim(let slots) = state.claimBegins() else { break }
                for _ in 0..<Int(random.next() % 3) {
                    // Now and then the shutdown begins while the claim is in flight.
                    if random.next() % 40 == 0 { state.stop() }
                    var jobs: [ClaimedJob] = []
                    for (kind, count) in slots.sorted(by: { $0.key < $1.key }) {
                        for _ in 0..<Int(random.next() % UInt64(count + 2)) {
                            // Now and then a job running here claimed again.
                            if random.next() % 4 == 0, let earlier = runs.randomElement(using: &random) {
                                attempts[earlier.id, default: 1] += 1
                                jobs.append(job(earlier.id, earlier.kind, attempt: attempts[earlier.id, default: 1]))
                            } else {
                                jobs.append(job(nextID, kind))
                                nextID += 1
                            }
                        }
                    }
                    for action in state.claimed(jobs) {
                        guard case .start(let job) = action else { continue }
                        runs.append(job)
                        _ = state.started(job, Int(job.id))
                    }
                    expectSlotsAccounted(state)
                }
                state.claimEnded(heldBack: random.next() % 2 == 0 ? [] : nil)
            case 2, 3:
                guard !runs.isEmpty else { break }
                let job = runs.remove(at: Int(random.next() % UInt64(runs.count)))
                if case .record = state.ending(job) { _ = state.ended(job) }
            case 4:
                if let job = runs.randomElement(using: &random) {
                    _ = state.interrupt(job.id, as: random.next() % 2 == 0 ? .cancelRequested : .leaseLost)
                }
            default:
                if random.next() % 40 == 0 { state.stop() }
            }
            expectSlotsAccounted(state)
        }
        for job in runs {
            if case .record = state.ending(job) { _ = state.ended(job) }
        }
        #expect(state.isDrained)
        #expect(state.free == state.capacity)
    }
}

