@testable import FleetQueue
@testable import DispatcherCore
import FleetSupport
@testable import FleetTestSupport
import Foundation
import Synchronization
import Testing

/// Who ran which built-in task, across every scheduler of a test.
final class TaskLog: Sendable {
    private let runs = Mutex<[(task: MaintenanceTask, owner: String)]>([])

    func perform(as owner: String) -> @Sendable (MaintenanceTask) async throws -> Int {
        { task in
            self.runs.withLock { $0.append((task, owner)) }
            return 0
        }
    }

    func count(_ task: MaintenanceTask) -> Int { runs.withLock { $0.filter { $0.task == task }.count } }
    func owners(_ task: MaintenanceTask) -> Set<String> { Set(runs.withLock { $0.filter { $0.task == task }.map(\.owner) }) }
}

@Suite struct SchedulerTests {
    func entry(_ line: String) throws -> ScheduleEntry {
        guard case .entry(let entry) = try ScheduleLine(line, vocabulary: MaintenanceTasks.vocabulary) else { throw TestFailure("\(line) is not an entry") }
        return entry
    }

    func scheduler(_ q: TestQueue, _ entries: [ScheduleEntry], owner: String, log: TaskLog, lateness: Duration = .seconds(60)) -> Scheduler {
        Scheduler(settings: ScheduleSettings(entries: entries, lateness: lateness), slots: ScheduleSlots(pool: q.pool),
                  owner: owner, perform: log.perform(as: owner), logger: testLogger)
    }

    /// A whole second an hour ago: synthetic slots stay within the slot rows' 24 h retention.
    let base = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 - 3600).rounded(.down))

    /// Slot instants of `entry` claimed so far, as epoch seconds, in order.
    func slots(_ q: TestQueue, _ entry: String) async throws -> [Int64] {
        try await q.pool.query(
            "SELECT extract(epoch FROM slot_at)::bigint AS s FROM schedule_slots WHERE entry = $1 ORDER BY slot_at", [entry]
        ).rows.map { try $0.int64("s") }
    }

    @Test func twoDispatchersRunEachSlotOnceOverSeveralSlots() async throws {
        let q = try await TestQueue.make()
        let log = TaskLog()
        let entries = [try entry("* * * * * * => leases.rescue"), try entry(#"*/2 * * * * * => drill.noop {"from":"schedule"}"#)]
        let a = RunningService(scheduler(q, entries, owner: "dispatcher-a", log: log))
        let b = RunningService(scheduler(q, entries, owner: "dispatcher-b", log: log))
        try await waitFor("three rescue slots and two job slots") {
            let (rescues, jobs) = (try await slots(q, "leases.rescue").count, try await slots(q, "drill.noop").count)
            return rescues >= 3 && jobs >= 2
        }
        try await a.stop()
        try await b.stop()

        let rescueSlots = try await slots(q, "leases.rescue")
        // Several slots ran (a starved machine may skip some: a late loop fires only the latest),
        // and each exactly once: one task run per slot row, whichever dispatcher won it.
        #expect(rescueSlots.count >= 3)
        #expect(log.count(.leasesRescue) == rescueSlots.count)
        let finished = try await q.pool.query(
            "SELECT count(*) AS n FROM schedule_slots WHERE entry = 'leases.rescue' AND finished_at IS NOT NULL AND error IS NULL").rows[0]
        #expect(try finished.int("n") == rescueSlots.count)

        let jobSlots = try await slots(q, "drill.noop")
        #expect(jobSlots.count >= 2)
        #expect(jobSlots.allSatisfy { $0 % 2 == 0 })
        let jobs = try await q.pool.query("""
            SELECT j.idempotency_key, j.payload::text AS payload, extract(epoch FROM s.slot_at)::bigint AS slot
            FROM jobs j JOIN schedule_slots s ON s.job_id = j.id WHERE j.kind = 'drill.noop' ORDER BY j.id
            """).rows
        #expect(try await q.pool.query("SELECT count(*) AS n FROM jobs").rows[0].int("n") == jobSlots.count)
        #expect(try jobs.map { try $0.int64("slot") } == jobSlots)
        for job in jobs {
            let slot = Date(timeIntervalSince1970: TimeInterval(try job.int64("slot")))
            #expect(job["idempotency_key"] == "schedule:drill.noop:\(slot.ISO8601Format())")
            #expect(job["payload"] == #"{"from": "schedule"}"#)
        }
    }

    @Test func racingForTheSameSlotsOneWinsEachAndTheLoserRunsNothing() async throws {
        let q = try await TestQueue.make()
        let log = TaskLog()
        let rescue = try entry("* * * * * * => leases.rescue")
        let job = try entry("* * * * * * => drill.noop")
        let schedulers = (0..<4).map { scheduler(q, [rescue, job], owner: "dispatcher-\($0)", log: log) }
        for second in 1...10 {
            let now = base.addingTimeInterval(TimeInterval(second) + 0.3)
            let outcomes = await withTaskGroup(of: [Scheduler.Outcome].self) { group in
                for scheduler in schedulers {
                    group.addTask {
                        [await scheduler.fire(rescue, after: now.addingTimeInterval(-1), now: now),
                         await scheduler.fire(job, after: now.addingTimeInterval(-1), now: now)]
                    }
                }
                return await group.reduce(into: []) { $0 += $1 }
            }
            let slot = base.addingTimeInterval(TimeInterval(second))
            #expect(outcomes.filter { $0 == .fired(slot) }.count == 2)
            #expect(outcomes.filter { $0 == .taken(slot) }.count == 6)
        }
        #expect(log.count(.leasesRescue) == 10)
        #expect(try await slots(q, "leases.rescue").count == 10)
        #expect(try await q.pool.query("SELECT count(*) AS n FROM jobs WHERE kind = 'drill.noop'").rows[0].int("n") == 10)
    }

    /// A graph entry: four dispatchers race for each slot; the winner enqueues the whole graph in
    /// its claim's transaction, each job after the ones it names, once per slot.
    @Test func aGraphEntryEnqueuesItsJobsInOrderOncePerSlot() async throws {
        let q = try await TestQueue.make()
        let log = TaskLog()
        let nightly = try entry(#"* * * * * * => graph:nightly {"jobs": [{"name": "a", "kind": "drill.noop", "payload": {"step": 1}}, {"name": "b", "kind": "drill.noop", "after": ["a"]}, {"name": "c", "kind": "drill.noop", "after": ["a", "b"]}]}"#)
        #expect(nightly.name == "graph:nightly")
        let schedulers = (0..<4).map { scheduler(q, [nightly], owner: "dispatcher-\($0)", log: log) }
        for second in 1...3 {
            let now = base.addingTimeInterval(TimeInterval(second) + 0.3)
            let outcomes = await withTaskGroup(of: Scheduler.Outcome.self) { group in
                for scheduler in schedulers { group.addTask { await scheduler.fire(nightly, after: now.addingTimeInterval(-1), now: now) } }
                return await group.reduce(into: []) { $0.append($1) }
            }
            #expect(outcomes.filter { $0 == .fired(base.addingTimeInterval(TimeInterval(second))) }.count == 1)
        }
        let jobs = try await q.pool.query("""
            SELECT j.id, j.idempotency_key, j.state::text AS state, j.payload::text AS payload,
                coalesce((SELECT array_agg(d.idempotency_key ORDER BY d.id) FROM jobs d WHERE d.id = ANY (j.depends_on))::text, '') AS after
            FROM jobs j ORDER BY j.id
            """).rows
        #expect(jobs.count == 9)
        let firsts = try await q.pool.query("SELECT job_id FROM schedule_slots WHERE entry = 'graph:nightly' ORDER BY slot_at").rows.map { $0["job_id"] }
        for second in 1...3 {
            let key = "schedule:graph:nightly:\(base.addingTimeInterval(TimeInterval(second)).ISO8601Format())"
            let slotJobs = jobs.filter { $0["idempotency_key"]?.hasPrefix(key + "/") == true }
            #expect(slotJobs.map { $0["idempotency_key"] } == ["a", "b", "c"].map { "\(key)/\($0)" })
            #expect(slotJobs.map { $0["state"] } == ["available", "waiting", "waiting"])
            #expect(slotJobs.map { $0["after"] } == ["", "{\(key)/a}", "{\(key)/a,\(key)/b}"])
            #expect(slotJobs.first?["payload"] == #"{"step": 1}"#)
            #expect(firsts[second - 1] == slotJobs.first?["id"])
        }
        let refused: [(String, String)] = [
            (#"* * * * * => graph:x {"jobs": [{"name": "a", "kind": "drill.noop", "after": ["b"]}, {"name": "b", "kind": "drill.noop", "after": ["a"]}]}"#,
             "graph:x: invalid job graph: the jobs 'a', 'b' run after one another in a cycle"),
            (#"* * * * * => graph:x {"jobs": [{"name": "a", "kind": "nope"}]}"#, "graph:x: job 'a' names 'nope', which is not a job kind"),
            (#"* * * * * => graph:x {"jobs": [{"name": "a", "kind": "drill.noop", "after": ["z"]}]}"#,
             "graph:x: invalid job graph: job 'a' runs after 'z', which the graph does not name"),
            (#"* * * * * => graph:x {"jobs": [{"name": "a", "kind": "drill.noop", "payload": [1]}]}"#, "the payload of graph:x is not"),
            (#"* * * * * => graph: {"jobs": []}"#, "a graph entry is named graph:<name>"),
        ]
        for (line, message) in refused {
            do {
                _ = try ScheduleLine(line, vocabulary: MaintenanceTasks.vocabulary)
                Issue.record("accepted: \(line)")
            } catch {
                #expect("\(error)".contains(message), "\(error)")
            }
        }
    }

    @Test func aDispatcherBackFromDowntimeFiresOnlyTheMostRecentMissedSlot() async throws {
        let q = try await TestQueue.make()
        let log = TaskLog()
        let rescue = try entry("* * * * * * => leases.rescue")
        let first = scheduler(q, [rescue], owner: "before", log: log)
        for second in 1...3 {
            let now = base.addingTimeInterval(TimeInterval(second))
            await first.fire(rescue, after: now.addingTimeInterval(-1), now: now)
        }
        // Down for 40 s. On start a scheduler looks back `lateness` (60 s) from its start.
        let restart = base.addingTimeInterval(43.5)
        let back = scheduler(q, [rescue], owner: "after", log: log)
        #expect(await back.fire(rescue, after: restart.addingTimeInterval(-60), now: restart) == .fired(base.addingTimeInterval(43)))
        let claimed = try await slots(q, "leases.rescue").map { $0 - Int64(base.timeIntervalSince1970) }
        #expect(claimed == [1, 2, 3, 43])
        #expect(log.count(.leasesRescue) == 4)

        // Beyond the lateness bound even the most recent slot is left alone.
        let strict = scheduler(q, [rescue], owner: "strict", log: log, lateness: .milliseconds(200))
        let late = base.addingTimeInterval(50.5)
        #expect(await strict.fire(rescue, after: late.addingTimeInterval(-10), now: late) == .late(base.addingTimeInterval(50)))
        #expect(try await slots(q, "leases.rescue").count == 4)
    }

    @Test func aRealSchedulerRestartedAfterDowntimeDoesNotReplay() async throws {
        let q = try await TestQueue.make()
        let log = TaskLog()
        let rescue = try entry("* * * * * * => leases.rescue")
        let before = RunningService(scheduler(q, [rescue], owner: "before", log: log))
        try await waitFor("a slot run before the downtime") { try await !slots(q, "leases.rescue").isEmpty }
        try await before.stop()
        let lastBefore = try #require(try await slots(q, "leases.rescue").last)
        // The downtime is the premise, counted in slots of the wall clock: at least three of them
        // pass while no scheduler runs.
        try await waitFor("three slots of downtime") { Date().timeIntervalSince1970 >= Double(lastBefore) + 3.5 }
        let restarted = Date()
        let after = RunningService(scheduler(q, [rescue], owner: "after", log: log))
        // A slot past the restart shows the restarted scheduler's loop ran past its look-back.
        try await waitFor("a slot after the restart") {
            try await slots(q, "leases.rescue").contains { Double($0) > restarted.timeIntervalSince1970 }
        }
        try await after.stop()
        // The gap held at least three slots; only one of them (the latest, at most one second
        // before the restart) ran.
        let gap = try await slots(q, "leases.rescue").filter { $0 > lastBefore && Double($0) <= restarted.timeIntervalSince1970 }
        #expect(gap.count <= 1)
        #expect(gap.allSatisfy { Double($0) > restarted.timeIntervalSince1970 - 1 })
        #expect(try await slots(q, "leases.rescue").count == log.count(.leasesRescue))
    }

    @Test func oldSlotRowsArePrunedByTheClaim() async throws {
        let q = try await TestQueue.make()
        try await q.pool.query("""
            INSERT INTO schedule_slots (entry, slot_at, claimed_by)
            VALUES ('jobs.prune', now() - interval '25 hours', 'x'), ('gone.entry', now() - interval '2 days', 'x'),
                   ('jobs.prune', now() - interval '23 hours', 'x')
            """)
        let claim = try await ScheduleSlots(pool: q.pool).claim(entry: "jobs.prune", slot: Date(), owner: "me", enqueue: nil)
        #expect(claim == ScheduleSlots.Claim(jobID: nil))
        #expect(try await q.pool.query("SELECT count(*) AS n FROM schedule_slots").rows[0].int("n") == 2)
    }

    @Test func settingsOverrideDisableAndRefuseBadEntriesNamingTheVariable() throws {
        let defaults = try MaintenanceTasks.schedule(from: [:])
        #expect(defaults.entries.map(\.name) == ["renders.timeout", "counts.fold", "leases.rescue", "kinds.sweep", "tokens.expire", "jobs.prune"])
        #expect(defaults.lateness == .seconds(60))

        let file = temporaryPath("schedule")
        try """
            # tokens more often, no sweep
            */30 * * * * * => tokens.expire
            off => kinds.sweep

            0 3 * * * => drill.noop {"a": 1}
            """.write(toFile: file, atomically: true, encoding: .utf8)
        let settings = try MaintenanceTasks.schedule(from: [
            "FLEET_SCHEDULE_FILE": file, "FLEET_SCHEDULE": "@hourly => drill.noop; off => jobs.prune", "FLEET_SCHEDULE_LATENESS_SECONDS": "5",
        ])
        #expect(settings.entries.map(\.name) == ["renders.timeout", "counts.fold", "leases.rescue", "tokens.expire", "drill.noop"])
        #expect(settings.entries[3].expression.description == "*/30 * * * * *")
        #expect(settings.entries[4].target == .job(kind: .drillNoop, payload: "{}"))
        #expect(settings.lateness == .seconds(5))

        let refused: [([String: String], String)] = [
            (["FLEET_SCHEDULE": "* * * * * => nope"], "configuration error: FLEET_SCHEDULE: entry 1 '* * * * * => nope': 'nope' is neither a built-in (counts.fold, jobs.prune, kinds.sweep, leases.rescue, renders.timeout, tokens.expire), a job kind nor a graph:<name>"),
            (["FLEET_SCHEDULE": "off => kinds.sweep; 61 * * * * => jobs.prune"], "configuration error: FLEET_SCHEDULE: entry 2 '61 * * * * => jobs.prune': minute field '61': 61 is outside 0...59"),
            (["FLEET_SCHEDULE": "* * * * * jobs.prune"], "configuration error: FLEET_SCHEDULE: entry 1 '* * * * * jobs.prune': '* * * * * jobs.prune' is not 'expression => target'"),
            (["FLEET_SCHEDULE": "* * * * * => jobs.prune {}"], "configuration error: FLEET_SCHEDULE: entry 1 '* * * * * => jobs.prune {}': the built-in jobs.prune takes no payload"),
            (["FLEET_SCHEDULE": "* * * * * => drill.noop [1]"], "configuration error: FLEET_SCHEDULE: entry 1 '* * * * * => drill.noop [1]': the payload of drill.noop is not a JSON object: [1]"),
            (["FLEET_SCHEDULE": "@daily => jobs.prune; @hourly => jobs.prune"], "configuration error: FLEET_SCHEDULE: entry 2 '@hourly => jobs.prune': jobs.prune is scheduled twice"),
            (["FLEET_SCHEDULE_FILE": "/nonexistent/schedule"], "configuration error: FLEET_SCHEDULE_FILE: cannot read /nonexistent/schedule"),
            (["FLEET_SCHEDULE_LATENESS_SECONDS": "-1"], "configuration error: FLEET_SCHEDULE_LATENESS_SECONDS: '-1' is not a whole number in 0...3600"),
        ]
        for (environment, message) in refused {
            #expect(throws: ConfigurationError.self) { _ = try MaintenanceTasks.schedule(from: environment) }
            do { _ = try MaintenanceTasks.schedule(from: environment) } catch { #expect("\(error)" == message) }
        }
        try "* * * * * => drill.noop\nbad line".write(toFile: file, atomically: true, encoding: .utf8)
        do {
            _ = try MaintenanceTasks.schedule(from: ["FLEET_SCHEDULE_FILE": file])
            Issue.record("a bad file line was accepted")
        } catch {
            #expect("\(error)" == "configuration error: FLEET_SCHEDULE_FILE: \(file):2 'bad line': 'bad line' is not 'expression => target'")
        }
    }
}
