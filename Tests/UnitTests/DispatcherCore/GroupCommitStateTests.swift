@testable import DispatcherCore
import Testing

/// The group commit's batching decisions, without a database: who goes at once, who waits, and
/// what each ending commit takes next (`GroupCommitState`).
@Suite struct GroupCommitStateTests {
    @Test func aRequestThatFindsAFreeSlotGoesAtOnceAlone() {
        var state = GroupCommitState<Int>(maxBatch: 10, maxInFlight: 2)
        #expect(state.arrive(1) == [1])
        #expect(state.arrive(2) == [2])
        #expect(state.inFlight == 2)
        #expect(state.waiting.isEmpty)
    }

    @Test func requestsArrivingWhileEverySlotCommitsShareTheNextCommit() {
        var state = GroupCommitState<Int>(maxBatch: 10, maxInFlight: 1)
        #expect(state.arrive(1) == [1])
        #expect(state.arrive(2) == nil)
        #expect(state.arrive(3) == nil)
        #expect(state.arrive(4) == nil)
        #expect(state.commitEnded() == [2, 3, 4])
        #expect(state.inFlight == 1)
        #expect(state.arrive(5) == nil)
        #expect(state.commitEnded() == [5])
        // Nothing waits: the slot is free, and the next request goes at once again.
        #expect(state.commitEnded() == nil)
        #expect(state.inFlight == 0)
        #expect(state.arrive(6) == [6])
    }

    @Test func aBatchTakesAtMostMaxBatchInArrivalOrder() {
        var state = GroupCommitState<Int>(maxBatch: 3, maxInFlight: 1)
        #expect(state.arrive(0) == [0])
        for item in 1...7 { #expect(state.arrive(item) == nil) }
        #expect(state.commitEnded() == [1, 2, 3])
        #expect(state.commitEnded() == [4, 5, 6])
        #expect(state.commitEnded() == [7])
        #expect(state.commitEnded() == nil)
        #expect(state.inFlight == 0)
    }

    @Test func eachEndingSlotTakesWhatWaitsWhileTheOtherKeepsCommitting() {
        var state = GroupCommitState<Int>(maxBatch: 100, maxInFlight: 2)
        #expect(state.arrive(1) == [1])
        #expect(state.arrive(2) == [2])
        #expect(state.arrive(3) == nil)
        #expect(state.arrive(4) == nil)
        #expect(state.commitEnded() == [3, 4])
        #expect(state.inFlight == 2)
        #expect(state.commitEnded() == nil)
        #expect(state.inFlight == 1)
        // One slot free again: the next request goes at once beside the one committing.
        #expect(state.arrive(5) == [5])
        #expect(state.inFlight == 2)
    }
}
