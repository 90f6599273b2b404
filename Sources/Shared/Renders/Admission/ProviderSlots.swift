import FleetPostgres
import FleetQueue

/// One open render of a provider as admission reads it: how long a worker has had it and how long
/// until its deadline.
public struct RenderClock: Sendable, Equatable {
    /// Since a worker first started it (`renders.started_at`: a worker taking it over after a
    /// crash keeps it); nil: not started yet.
    public var age: Duration?
    /// Until its deadline; at or below zero the render ends without its provider's answer.
    public var untilDeadline: Duration

    public init(age: Duration?, untilDeadline: Duration) {
        self.age = age
        self.untilDeadline = untilDeadline
    }
}

/// A provider's renders holding or about to take back its slots, read with its load: those whose
/// `render.run` job runs, and those started before whose job waits to be taken again (a dead
/// worker's, resumed at the provider by the next worker).
public struct RendersInFlight: Sendable, Equatable {
    public var running: [RenderClock]
    public var resumed: [RenderClock]

    public init(running: [RenderClock] = [], resumed: [RenderClock] = []) {
        self.running = running
        self.resumed = resumed
    }

    /// The provider's open renders that a worker has started or whose job runs
    /// (`runningJobIDs`, `LimitLoad`), from the open renders' index.
    static func read(provider: String, runningJobIDs: [Int64], from executor: any PostgresExecutor) async throws -> RendersInFlight {
        let rows = try await executor.query("""
            SELECT coalesce(job_id = ANY($2::bigint[]), false) AS running, extract(epoch FROM now() - started_at) AS age,
                extract(epoch FROM deadline_at - now()) AS until_deadline
            FROM renders WHERE status IN ('pending', 'processing') AND provider = $1
                AND (started_at IS NOT NULL OR job_id = ANY($2::bigint[]))
            """, [provider, PostgresArray(runningJobIDs)]).rows
        var inFlight = RendersInFlight()
        for row in rows {
            let clock = RenderClock(age: try row["age"].map { _ in .seconds(try row.double("age")) },
                                    untilDeadline: .seconds(try row.double("until_deadline")))
            if try row.bool("running") { inFlight.running.append(clock) } else { inFlight.resumed.append(clock) }
        }
        return inFlight
    }
}

/// When each of a provider's slots frees, from now, as a value: the running renders hold theirs,
/// the renders ahead of a new one take them in turn, and the new one starts in the soonest left
/// (`RenderCapacity.retryAfter`, docs/renders.md "Admission control").
///
/// How long a render holds its slot: a render younger than twice the provider's mean run time is
/// on its way and frees its slot when the mean says (at once if it is past the mean); an older one
/// has shown it is not a typical render (a provider job hanging, a slow answer, a 429 retried), and
/// the only bound known for it is its deadline, where the worker gives up on it. Either way a slot
/// frees at the latest at its render's deadline.
struct ProviderSlots {
    let latency: Duration
    /// When each slot frees, soonest first.
    private(set) var freeAt: [Duration]

    /// `running`: the running jobs under the provider's key; `clocks`: those of them whose render
    /// was read (the others, read apart, are taken to free their slot after one mean run time).
    init(maxRunning: Int, running: Int, clocks: [RenderClock], latency: Duration) {
        self.latency = latency
        let unread = repeatElement(latency, count: max(0, running - clocks.count))
        let ends = (clocks.map { Self.end(of: $0, startingIn: .zero, latency: latency) } + unread).sorted()
        // More running than slots (a limit lowered): a slot frees once the surplus has ended.
        let surplus = max(0, ends.count - maxRunning)
        freeAt = Array(repeating: .zero, count: max(0, maxRunning - ends.count)) + ends.dropFirst(surplus)
    }

    /// When the soonest slot frees (nil: the provider has none).
    var soonest: Duration? { freeAt.first }

    /// `render` takes the soonest slot, unless its deadline passes first (then it ends without one).
    mutating func seat(_ render: RenderClock) {
        guard let start = freeAt.first, start < render.untilDeadline else { return }
        freeAt.removeFirst()
        let end = Self.end(of: render, startingIn: start, latency: latency)
        freeAt.insert(end, at: freeAt.firstIndex { $0 > end } ?? freeAt.endIndex)
    }

    /// When `render`, taking a slot `start` from now, frees it.
    static func end(of render: RenderClock, startingIn start: Duration, latency: Duration) -> Duration {
        let ageThen = render.age.map { $0 + start } ?? .zero
        let expected = ageThen < latency * 2 ? start + max(.zero, latency - ageThen) : render.untilDeadline
        return max(start, min(expected, render.untilDeadline))
    }
}
