@testable import FleetPostgres
import Testing

/// The notifier's LISTEN bookkeeping, without a database: which LISTEN/UNLISTEN to send as
/// subscriptions come and go, and who is told `.mightHaveMissed` after a (re)connection.
@Suite struct ListenStateMachineTests {
    /// Runs every command the machine asks for, as the notifier's thread does; returns them.
    private func reconcile(_ machine: inout ListenStateMachine<String>) -> [ListenStateMachine<String>.Command] {
        var ran: [ListenStateMachine<String>.Command] = []
        while let command = machine.nextCommand() {
            ran.append(command)
            machine.succeeded(command)
        }
        return ran
    }

    @Test func aChannelIsListenedToWhileSomeSubscriptionHoldsIt() {
        var machine = ListenStateMachine<String>()
        machine.connected()
        machine.subscribe(1, to: ["a"], "one")
        machine.subscribe(2, to: ["a", "b"], "both")
        #expect(reconcile(&machine) == [.listen("a"), .listen("b")])
        #expect(machine.takeUntold() == ["one", "both"])
        #expect(machine.takeUntold() == [])
        #expect(machine.recipients(of: "a") == ["one", "both"])
        #expect(machine.recipients(of: "b") == ["both"])
        #expect(machine.recipients(of: "c") == [])

        #expect(machine.unsubscribe(2) == "both")
        #expect(reconcile(&machine) == [.unlisten("b")])
        #expect(machine.takeUntold() == [])
        #expect(machine.unsubscribe(2) == nil)
        #expect(machine.unsubscribe(1) == "one")
        #expect(reconcile(&machine) == [.unlisten("a")])
        #expect(machine.listening == [])
    }

    @Test func aNewSubscriptionOfListenedChannelsIsToldAtOnceAndNothingIsSent() {
        var machine = ListenStateMachine<String>()
        machine.connected()
        machine.subscribe(1, to: ["a"], "first")
        _ = reconcile(&machine)
        #expect(machine.takeUntold() == ["first"])
        machine.subscribe(2, to: ["a"], "second")
        #expect(reconcile(&machine) == [])
        #expect(machine.takeUntold() == ["second"])
    }

    /// Told only once all its channels are listened to: not while a LISTEN is still to run.
    @Test func aSubscriptionIsToldOnlyOnceAllItsChannelsAreListenedTo() {
        var machine = ListenStateMachine<String>()
        machine.connected()
        machine.subscribe(1, to: ["a", "b"], "both")
        let first = machine.nextCommand()
        #expect(first == .listen("a"))
        machine.succeeded(.listen("a"))
        #expect(machine.takeUntold() == [])
        _ = reconcile(&machine)
        #expect(machine.takeUntold() == ["both"])
    }

    @Test func withoutAConnectionNothingIsSentAndNobodyIsTold() {
        var machine = ListenStateMachine<String>()
        machine.subscribe(1, to: ["a"], "one")
        #expect(machine.nextCommand() == nil)
        #expect(machine.takeUntold() == [])
        machine.connected()
        #expect(reconcile(&machine) == [.listen("a")])
        #expect(machine.takeUntold() == ["one"])
    }

    /// A lost connection takes its LISTENs with it: the next session listens to every held
    /// channel again, and every subscription is told it may have missed some.
    @Test func aReconnectionListensAgainAndTellsEverySubscription() {
        var machine = ListenStateMachine<String>()
        machine.connected()
        machine.subscribe(1, to: ["a"], "one")
        machine.subscribe(2, to: ["b"], "two")
        _ = reconcile(&machine)
        #expect(machine.takeUntold() == ["one", "two"])

        machine.connectionLost()
        #expect(machine.listening == [])
        machine.unsubscribe(2)
        machine.subscribe(3, to: ["c"], "three")
        #expect(machine.nextCommand() == nil)
        machine.connected()
        #expect(reconcile(&machine) == [.listen("a"), .listen("c")])
        #expect(machine.takeUntold() == ["one", "three"])
    }

    @Test func unsubscribingAllEndsEverySubscription() {
        var machine = ListenStateMachine<String>()
        machine.subscribe(1, to: ["a"], "one")
        machine.subscribe(2, to: ["a"], "two")
        #expect(machine.unsubscribeAll() == ["one", "two"])
        #expect(machine.wanted == [])
        #expect(machine.recipients(of: "a") == [])
    }
}
