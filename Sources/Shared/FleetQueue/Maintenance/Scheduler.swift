import Foundation
import Logging
import Metrics
import ServiceLifecycle

/// Runs the schedule (`docs/schedule.md`): one loop per entry, each sleeping until its next
/// slot. A slot runs in the dispatcher whose claim row wins (`ScheduleSlots`), so any number
/// of dispatchers may run the same schedule. After downtime or a stall only the most recent
/// missed slot fires, and only while it is at most `lateness` old: never a backlog.
public struct Scheduler: Service {
    let entries: [ScheduleEntry]
    let lateness: Duration
    let slots: ScheduleSlots
    /// Names this process in `schedule_slots.claimed_by`.
    let owner: String
    /// Runs a built-in task; returns how many items it handled (for the log).
    let perform: @Sendable (MaintenanceTask) async throws -> Int
    let logger: Logger

    public init(settings: ScheduleSettings, slots: ScheduleSlots, owner: String,
                perform: @escaping @Sendable (MaintenanceTask) async throws -> Int, logger: Logger) {
        self.entries = settings.entries
        self.lateness = settings.lateness
        self.slots = slots
        self.owner = owner
        self.perform = perform
        self.logger = logger
    }

    public func run() async throws {
        let started = Date()
        logger.info("schedule started", metadata: ["entries": "\(entries.map { "\($0.expression) => \($0.name)" })"])
        await withTaskGroup(of: Void.self) { group in
            for entry in entries {
                group.addTask { await self.loop(entry, after: started - self.lateness.seconds) }
            }
            try? await gracefulShutdown()
            group.cancelAll()
        }
    }

    private func loop(_ entry: ScheduleEntry, after start: Date) async {
        var after = start
        while !Task.isCancelled {
            let now = Date()
            await fire(entry, after: after, now: now)
            after = now
            guard let next = entry.expression.next(after: now) else {
                logger.warning("schedule entry never fires again", metadata: ["entry": "\(entry.name)"])
                return
            }
            do { try await Task.sleep(for: .seconds(max(0, next.timeIntervalSince(Date())))) } catch { return }
        }
    }

    public enum Outcome: Sendable, Equatable {
        /// No slot fell in the window.
        case none
        /// This process claimed the slot and ran it (or enqueued its job).
        case fired(Date)
        /// Another dispatcher had claimed it.
        case taken(Date)
        /// The most recent slot was older than the lateness bound.
        case late(Date)
        /// The claim failed (database unreachable); the slot is lost, the next one will do.
        case failed(Date)
    }

    /// Fires the most recent slot of `entry` in `(after, now]` if this process wins it and it is
    /// at most `lateness` old; the older slots of the window are skipped, never replayed.
    @discardableResult
    func fire(_ entry: ScheduleEntry, after: Date, now: Date) async -> Outcome {
        var latest: Date?
        var missed = 0
        var cursor = entry.expression.next(after: after)
        while let slot = cursor, slot <= now {
            if latest != nil { missed += 1 }
            latest = slot
            cursor = entry.expression.next(after: slot)
        }
        guard let slot = latest else { return .none }
        let metadata: Logger.Metadata = ["entry": "\(entry.name)", "slot": "\(slot.ISO8601Format())"]
        if missed > 0 {
            count(entry, "skipped", by: missed)
            logger.warning("missed schedule slots skipped", metadata: metadata.merging(["skipped": "\(missed)"]) { $1 })
        }
        guard now.timeIntervalSince(slot) <= lateness.seconds else {
            count(entry, "skipped")
            logger.warning("schedule slot too late to run; skipped", metadata: metadata)
            return .late(slot)
        }
        let claim: ScheduleSlots.Claim?
        do {
            claim = try await slots.claim(entry: entry.name, slot: slot, owner: owner, enqueue: try enqueue(for: entry, slot: slot))
        } catch {
            count(entry, "failed")
            logger.error("schedule slot claim failed", metadata: metadata.merging(["error": "\(error)"]) { $1 })
            return .failed(slot)
        }
        guard let claim else {
            count(entry, "taken")
            return .taken(slot)
        }
        count(entry, "fired")
        switch entry.target {
        case .job(let kind, _):
            logger.info("schedule slot enqueued its job", metadata: metadata.merging(["kind": "\(kind)", "job_id": "\(claim.jobID ?? 0)"]) { $1 })
        case .graph:
            logger.info("schedule slot enqueued its graph", metadata: metadata.merging(["first_job_id": "\(claim.jobID ?? 0)"]) { $1 })
        case .task(let task):
            await run(task, entry: entry, slot: slot, metadata: metadata)
        }
        return .fired(slot)
    }

    private func run(_ task: MaintenanceTask, entry: ScheduleEntry, slot: Date, metadata: Logger.Metadata) async {
        let started = ContinuousClock.now
        var failure: String?
        do {
            let handled = try await perform(task)
            logger.debug("schedule task done", metadata: metadata.merging(["handled": "\(handled)"]) { $1 })
        } catch {
            failure = "\(error)"
            Counter(label: "fleet_schedule_task_errors_total", dimensions: [("entry", entry.name)]).increment()
            logger.error("schedule task failed", metadata: metadata.merging(["error": "\(error)"]) { $1 })
        }
        Timer(label: "fleet_schedule_task_seconds", dimensions: [("entry", entry.name)])
            .recordNanoseconds(Int64((ContinuousClock.now - started).seconds * 1e9))
        do {
            try await slots.finish(entry: entry.name, slot: slot, error: failure)
        } catch {
            logger.warning("schedule slot outcome not recorded", metadata: metadata.merging(["error": "\(error)"]) { $1 })
        }
    }

    private func enqueue(for entry: ScheduleEntry, slot: Date) throws -> ScheduleSlots.Enqueue? {
        let key = "schedule:\(entry.name):\(slot.ISO8601Format())"
        return switch entry.target {
        case .task: nil
        case .job(let kind, let payload): .job(NewJob(kind: kind, payload: payload, idempotencyKey: key))
        case .graph(let graph): .graph(try graph.graph(idempotencyKey: key))
        }
    }

    private func count(_ entry: ScheduleEntry, _ outcome: String, by amount: Int = 1) {
        Counter(label: "fleet_schedule_slots_total", dimensions: [("entry", entry.name), ("outcome", outcome)]).increment(by: amount)
    }
}
