@testable import FleetQueue
@testable import Providers
@testable import Renders
import Testing

/// Render admission between reads, as a value: what the kept estimate admits and refuses, and
/// which read answers whom.
@Suite struct AdmissionLedgerTests {
    /// A provider of 10 slots all busy with 100 renders waiting: at 2 s each and a 30 s deadline
    /// a render must start by 23 s, 11 rounds, so 110 ahead of it at most.
    static let full = AdmissionEstimate(
        settings: RenderSettings(provider: "fal-fashn", enabledCategories: [.tops]),
        load: LimitLoad(rule: ConcurrencyLimit(key: "provider:fal-fashn", maxRunning: 10), running: 10, waiting: 100, startedInWindow: 0),
        latency: .seconds(2), inputRunTimes: [:])

    static func ledger(with estimate: AdmissionEstimate = full) -> AdmissionLedger<String> {
        var ledger = AdmissionLedger<String>()
        let read = ledger.readStarted(at: .now)
        _ = ledger.readEnded(read, with: estimate)
        return ledger
    }

    @Test func requestsBetweenTwoReadsCountTheRendersAdmittedBeforeThem() {
        var ledger = Self.ledger()
        let decisions = (0..<15).map { _ in ledger.admit(inputWait: .zero, deadline: .seconds(30)) }
        #expect(decisions.filter { $0 == .admitted(counted: true) }.count == 10)
        #expect(decisions.last == .refused(retryAfterSeconds: 1))
        // A transaction that rolled back frees its place; a committed one keeps it.
        ledger.ended(counted: true, committed: false)
        ledger.ended(counted: true, committed: true)
        #expect(ledger.unseen == 9)
        #expect(ledger.admit(inputWait: .zero, deadline: .seconds(30)) == .admitted(counted: true))
        #expect(ledger.admit(inputWait: .zero, deadline: .seconds(30)) == .refused(retryAfterSeconds: 1))
    }

    /// A render needing a paused kind is refused at once, counted nowhere; one needing only kinds
    /// that run is decided on the load as before.
    @Test func aRenderNeedingAPausedKindIsRefusedAndNothingIsCounted() {
        var idle = Self.full
        idle.load = LimitLoad(rule: idle.load.rule, running: 0, waiting: 0, startedInWindow: 0)
        idle.pausedKinds = [.garmentCutout]
        var ledger = Self.ledger(with: idle)
        #expect(ledger.admit(inputWait: .zero, deadline: .seconds(30), needs: [.renderRun, .imageNormalize, .garmentCutout])
            == .paused(kinds: [.garmentCutout], retryAfterSeconds: 30))
        #expect(ledger.unseen == 0)
        #expect(ledger.admit(inputWait: .zero, deadline: .seconds(30), needs: [.renderRun, .imageNormalize]) == .admitted(counted: true))
        idle.pausedKinds = [.renderRun, .imageNormalize]
        ledger = Self.ledger(with: idle)
        #expect(ledger.admit(inputWait: .zero, deadline: .seconds(30), needs: [.renderRun, .imageNormalize])
            == .paused(kinds: [.imageNormalize, .renderRun], retryAfterSeconds: 30))
    }

    /// A limit set or removed through this dispatcher: a request after it decides on a read
    /// started after the change, not on the fresh estimate read before it.
    @Test func aLimitChangedHereMakesTheNextRequestWaitForANewRead() {
        var ledger = Self.ledger()
        let startedBefore = ledger.readStarted(at: .now)
        let fresh = ledger.lookUp(now: .now, maxAge: .seconds(1), waiter: "fresh").0
        #expect(fresh.decidesNow)
        ledger.changed(at: .now)
        // A read that started before the change but ends after it answers nobody as fresh.
        _ = ledger.readEnded(startedBefore, with: Self.full)
        let afterChange = ledger.lookUp(now: .now, maxAge: .seconds(1), waiter: "after the change").0
        #expect(!afterChange.decidesNow)
        let after = ledger.readStarted(at: .now)
        #expect(ledger.readEnded(after, with: Self.full) == ["after the change"])
        let later = ledger.lookUp(now: .now, maxAge: .seconds(1), waiter: "later").0
        #expect(later.decidesNow)
    }

    @Test func aCommittedRenderCountsUntilAReadStartedAfterItsCommit() {
        var ledger = Self.ledger()
        #expect(ledger.admit(inputWait: .zero, deadline: .seconds(30)) == .admitted(counted: true))
        let before = ledger.readStarted(at: .now)
        ledger.ended(counted: true, committed: true)
        _ = ledger.readEnded(before, with: Self.full)
        #expect(ledger.unseen == 1, "the read may have missed the commit")
        let after = ledger.readStarted(at: .now)
        var seen = Self.full
        seen.load = LimitLoad(rule: seen.load.rule, running: 10, waiting: 101, startedInWindow: 0)
        _ = ledger.readEnded(after, with: seen)
        #expect(ledger.unseen == 0)
        #expect((0..<10).map { _ in ledger.admit(inputWait: .zero, deadline: .seconds(30)) }.filter { $0 == .admitted(counted: true) }.count == 9)
    }

    @Test func withoutARuleNothingIsCountedAndOnlyTheInputsWaitRefuses() {
        var free = Self.full
        free.load = LimitLoad(rule: nil, running: 0, waiting: 0, startedInWindow: 0)
        var ledger = Self.ledger(with: free)
        #expect((0..<500).allSatisfy { _ in ledger.admit(inputWait: .zero, deadline: .seconds(30)) == .admitted(counted: false) })
        #expect(ledger.unseen == 0)
        // 30 − 5 − 2 s leave 23 s for the inputs.
        #expect(ledger.admit(inputWait: .seconds(25), deadline: .seconds(30)) == .refused(retryAfterSeconds: 2))
    }

    @Test func aWaiterIsAnsweredByAReadStartedAfterItArrived() {
        var ledger = AdmissionLedger<String>()
        let start = ContinuousClock.now
        let (first, signal) = ledger.lookUp(now: start, maxAge: .milliseconds(250), waiter: "a")
        guard case .wait = first else { Issue.record("no estimate yet, yet \(first)"); return }
        #expect(signal)
        let inFlight = ledger.readStarted(at: start)
        // Arrived while a read runs: that read may have looked before this request's change.
        let (second, again) = ledger.lookUp(now: start, maxAge: .zero, waiter: "b")
        guard case .wait = second else { Issue.record("\(second)"); return }
        #expect(again, "the read in flight does not answer it: another must follow")
        #expect(ledger.readEnded(inFlight, with: Self.full) == ["a"])
        let next = ledger.readStarted(at: .now)
        #expect(ledger.readFailed(next) == ["b"])
        // Fresh enough: answered at once; stale: waits.
        guard case .estimate(let estimate) = ledger.lookUp(now: start + .milliseconds(100), maxAge: .milliseconds(250), waiter: "c").0 else {
            Issue.record("a 100 ms old estimate was not used"); return
        }
        #expect(estimate == Self.full)
        guard case .wait = ledger.lookUp(now: start + .seconds(1), maxAge: .milliseconds(250), waiter: "d").0 else {
            Issue.record("a 1 s old estimate was used"); return
        }
        #expect(ledger.stop() == ["d"])
        guard case .stopped = ledger.lookUp(now: .now, maxAge: .seconds(1), waiter: "e").0 else { Issue.record("admitted after stop"); return }
    }

    /// A provider of 4 slots whose renders take 1 s on the mean, its running renders `running`,
    /// `resumed` of its renders waiting to be taken again (so among its `waiting`): a render asked
    /// with a 30 s deadline must start by 30 − 5 − 1 = 24 s.
    static func inFlight(running: [RenderClock], resumed: [RenderClock] = [], waiting: Int = 0) -> AdmissionEstimate {
        AdmissionEstimate(
            settings: RenderSettings(provider: "fal-fashn", enabledCategories: [.tops]),
            load: LimitLoad(rule: ConcurrencyLimit(key: "provider:fal-fashn", maxRunning: 4), running: running.count, waiting: waiting, startedInWindow: 0),
            latency: .seconds(1), inputRunTimes: [:], inFlight: RendersInFlight(running: running, resumed: resumed))
    }

    static func clock(age: Double?, untilDeadline: Double) -> RenderClock {
        RenderClock(age: age.map { .milliseconds(Int($0 * 1000)) }, untilDeadline: .milliseconds(Int(untilDeadline * 1000)))
    }

    /// Admits renders one after another until the first refusal: how many got in, and the refusal.
    static func admitUntilRefused(_ estimate: AdmissionEstimate) -> (admitted: Int, refusal: AdmissionLedger<String>.Decision?) {
        var admission = Self.ledger(with: estimate)
        for admitted in 0..<1_000 {
            let decision = admission.admit(inputWait: .zero, deadline: .seconds(30))
            if decision != .admitted(counted: true) { return (admitted, decision) }
        }
        return (1_000, nil)
    }

    /// Renders hanging at the provider (far older than its mean) hold their slots until their
    /// deadlines: near their deadlines, the renders they hold up still fit; far from them, a new
    /// render is refused at once instead of waiting out its own deadline behind them.
    @Test func hangingRendersHoldTheirSlotsUntilTheirDeadlines() {
        // Free at 3 s, then one render a second per slot until 24 s: 22 rounds of 4.
        let nearTheirDeadlines = Self.inFlight(running: Array(repeating: Self.clock(age: 27, untilDeadline: 3), count: 4))
        #expect(Self.admitUntilRefused(nearTheirDeadlines) == (88, .refused(retryAfterSeconds: 1)))
        // Free at 18 s: rounds at 18 … 24 s, 7 of 4.
        let midway = Self.inFlight(running: Array(repeating: Self.clock(age: 12, untilDeadline: 18), count: 4))
        #expect(Self.admitUntilRefused(midway) == (28, .refused(retryAfterSeconds: 1)))
        // Resumed after a worker's crash a few seconds after their start, free at 26 s: none fits,
        // and the refusal says when the first slot frees past the latest start.
        let resumedEarly = Self.inFlight(running: Array(repeating: Self.clock(age: 4, untilDeadline: 26), count: 4))
        #expect(Self.admitUntilRefused(resumedEarly) == (0, .refused(retryAfterSeconds: 2)))
        // A slot frees at its render's deadline at the latest, even one just started.
        #expect(ProviderSlots.end(of: Self.clock(age: 0, untilDeadline: 0.5), startingIn: .zero, latency: .seconds(1)) == .milliseconds(500))
    }

    /// Renders within twice the mean free their slots when the mean says: fresh ones after the rest
    /// of it, those past it at once; as many fit as with slots turning over every mean.
    @Test func freshRendersFreeTheirSlotsWhenTheMeanSays() {
        let fresh = Self.inFlight(running: Array(repeating: Self.clock(age: 0.5, untilDeadline: 29.5), count: 4))
        // Rounds at 0.5 … 23.5 s.
        #expect(Self.admitUntilRefused(fresh) == (96, .refused(retryAfterSeconds: 1)))
        let pastTheMean = Self.inFlight(running: Array(repeating: Self.clock(age: 1.5, untilDeadline: 28.5), count: 4))
        // Rounds at 0 … 24 s.
        #expect(Self.admitUntilRefused(pastTheMean) == (100, .refused(retryAfterSeconds: 1)))
        // Not started yet (a job just claimed): its whole mean ahead.
        #expect(ProviderSlots.end(of: Self.clock(age: nil, untilDeadline: 30), startingIn: .seconds(2), latency: .seconds(1)) == .seconds(3))
        // Without their ages read (`RendersInFlight` empty), slots turn over every mean as before.
        var unread = fresh
        unread.inFlight = RendersInFlight()
        #expect(Self.admitUntilRefused(unread) == (96, .refused(retryAfterSeconds: 1)))
    }

    /// Hanging, fresh and resumed renders together: each slot frees on its own render's clock, and
    /// the resumed render waiting for a worker takes one for the rest of its own life.
    @Test func aMixFreesEachSlotOnItsOwnRendersClock() {
        let mix = Self.inFlight(
            running: [Self.clock(age: 20, untilDeadline: 10), Self.clock(age: 20, untilDeadline: 10),
                      Self.clock(age: 0.2, untilDeadline: 29.8), Self.clock(age: 0.2, untilDeadline: 29.8)],
            resumed: [Self.clock(age: 10, untilDeadline: 20)], waiting: 1)
        // Slots free at 0.8, 0.8, 10, 10 s; the resumed render takes one at 0.8 until 20 s. New
        // renders: on the slot from 0.8 s, 24 (0.8 … 23.8 s); on the two from 10 s, 15 each; on the
        // one from 20 s, 5: 59. Turning over every mean, 95 would have been admitted.
        #expect(Self.admitUntilRefused(mix) == (59, .refused(retryAfterSeconds: 1)))
        var slots = ProviderSlots(maxRunning: 4, running: 4, clocks: mix.inFlight.running, latency: .seconds(1))
        #expect(slots.freeAt == [.milliseconds(800), .milliseconds(800), .seconds(10), .seconds(10)])
        slots.seat(mix.inFlight.resumed[0])
        #expect(slots.freeAt == [.milliseconds(800), .seconds(10), .seconds(10), .seconds(20)])
        // A render whose deadline comes before any slot frees takes none.
        slots.seat(Self.clock(age: nil, untilDeadline: 0.5))
        #expect(slots.freeAt == [.milliseconds(800), .seconds(10), .seconds(10), .seconds(20)])
        // More running than slots (a limit lowered): the first slot frees when the surplus ended.
        let over = ProviderSlots(maxRunning: 2, running: 3, clocks: [Self.clock(age: 20, untilDeadline: 5)], latency: .seconds(1))
        #expect(over.freeAt == [.seconds(1), .seconds(5)])
    }
}

extension AdmissionLedger.LookUp {
    /// Decided on the estimate at hand, without waiting for a read.
    var decidesNow: Bool { if case .estimate = self { true } else { false } }
}
