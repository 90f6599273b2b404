import FleetPostgres
import FleetSupport
import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import Tracing

/// Runs registered handlers on jobs claimed from the queue: claims sized to free slots,
/// leases renewed by heartbeat, outcomes written in batches, wake-ups by LISTEN/NOTIFY (a
/// subscription to the process's `Notifier`) with a jittered poll as the guarantee, and expired leases rescued. On graceful shutdown it
/// stops claiming, lets running jobs finish within the grace period, then hands the rest
/// back to the queue at once.
public final class WorkerRuntime: Service, Sendable {
    public let id: String
    private let configuration: WorkerConfiguration
    private let driver: PostgresQueueDriver
    private let handlers: [JobKind: any JobHandler]
    private let notifier: Notifier
    /// The kinds whose handlers use limits (`JobHandler.usesLimits`).
    private let limitedKinds: Set<JobKind>
    private let logger: Logger
    private let executable: String
    private let recorder: OutcomeRecorder
    private let metrics: WorkerMetrics
    /// The tracer when tracing is bootstrapped: each sampled job's queue wait and run are spans
    /// (`JobSpans`); nil: none are made.
    private let tracer: (any Tracer)? = TracePropagation.isTracing ? InstrumentationSystem.tracer : nil
    private let state: Mutex<State>
    /// Where this worker's claims start in the claim index, per kind.
    private let frontiers: ClaimFrontiers
    private let wakeups: AsyncStream<Void>
    private let wakeContinuation: AsyncStream<Void>.Continuation
    /// Whether the worker may claim now: false while what its jobs need is down (the image store,
    /// `StorageReadiness`); the poll asks again.
    private let mayClaim: @Sendable () -> Bool

    private struct State {
        var free: [JobKind: Int]
        /// By job id: the attempt this worker holds.
        var running: [Int64: RunningJob] = [:]
        /// Earlier attempts of jobs this worker claimed again while they still ran here: taken back
        /// while it lived (its LISTEN session dropped and the reaper took its jobs, `WorkerLock`;
        /// or a lease it could not renew in time). Interrupted as lost; they record nothing but
        /// still hold their slot until their task ends.
        var superseded: [AttemptKey: RunningJob] = [:]
        /// More due jobs are likely waiting: a freed slot should trigger a claim.
        var backlog = true
        /// A fleet-wide limit left due jobs waiting: a slot freed anywhere should trigger a claim.
        var heldBack = false
        var stopping = false
    }

    private struct AttemptKey: Hashable {
        let id: Int64
        let attempt: Int
    }

    private struct RunningJob {
        let job: ClaimedJob
        let task: Task<Void, Never>
        var disposition = Disposition.normal
        /// Its outcome is being recorded; nothing else may record one.
        var finishing = false
    }

    /// Why a running job was interrupted, which decides what its end records.
    private enum Disposition {
        case normal, cancelRequested, leaseLost, shutdown
    }

    /// A worker claiming on `executor`'s queue (a pool: the runtime borrows connections for its
    /// claims, heartbeats and outcome batches).
    public convenience init(
        executable: String, configuration: WorkerConfiguration, executor: any PostgresExecutor, notifier: Notifier,
        handlers: [any JobHandler], logger: Logger, mayClaim: @escaping @Sendable () -> Bool = { true }
    ) {
        self.init(
            executable: executable, configuration: configuration, driver: PostgresQueueDriver(executor: executor), notifier: notifier,
            handlers: handlers, logger: logger, mayClaim: mayClaim)
    }

    init(
        executable: String, configuration: WorkerConfiguration, driver: PostgresQueueDriver, notifier: Notifier,
        handlers: [any JobHandler], logger: Logger, mayClaim: @escaping @Sendable () -> Bool = { true }
    ) {
        self.mayClaim = mayClaim
        let host = ProcessInfo.processInfo.hostName
        let suffix = String(UInt32.random(in: 0...UInt32.max), radix: 16)
        self.id = "\(executable)@\(host):\(getpid()):\(suffix)"
        self.executable = executable
        self.configuration = configuration
        self.frontiers = ClaimFrontiers(restartEvery: configuration.claimRestartInterval)
        self.driver = driver
        self.handlers = Dictionary(handlers.map { ($0.kind, $0) }, uniquingKeysWith: { first, _ in first })
        self.limitedKinds = Set(self.handlers.values.filter(\.usesLimits).map(\.kind))
        var logger = logger
        logger[metadataKey: "worker_id"] = "\(id)"
        self.logger = logger
        self.notifier = notifier
        self.recorder = OutcomeRecorder(driver: driver, owner: id, logger: logger)
        self.metrics = WorkerMetrics(kinds: Array(self.handlers.keys))
        let free = Dictionary(uniqueKeysWithValues: self.handlers.keys.map { ($0, max(1, configuration.concurrency[$0] ?? 1)) })
        self.state = Mutex(State(free: free))
        (wakeups, wakeContinuation) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    public var kinds: [JobKind] { handlers.keys.sorted() }

    /// This worker's row in `workers`; its id is its jobs' `lease_owner`.
    public var record: WorkerRecord {
        WorkerRecord(id: id, host: ProcessInfo.processInfo.hostName, pid: getpid(), executable: executable, kinds: kinds)
    }

    public func run() async throws {
        try await driver.workerRegister(record)
        logger.info("worker started", metadata: [
            "kinds": "\(kinds.map(\.rawValue))",
            "concurrency": "\(state.withLock { $0.free.map { "\($0.key)=\($0.value)" }.sorted() })",
        ])
        // A limited kind's slots free up when jobs finish anywhere in the fleet.
        let limited = !limitedKinds.isEmpty
        let topics: [any NotificationChannel] = [QueueChannel.jobs, QueueChannel.control] + (limited ? [QueueChannel.finished] : [])
        let subscription = notifier.subscribe(to: topics)
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.produce() }
            group.addTask { await self.consumeNotifications(subscription.events) }
            group.addTask { await repeatEvery(self.configuration.lease / 3) { await self.heartbeat() } }
            group.addTask { await repeatEvery(self.configuration.pollInterval) { self.wake() } }
            if limited {
                group.addTask {
                    await repeatEvery(self.configuration.heldBackPollInterval) {
                        if self.state.withLock({ $0.heldBack }) { self.wake() }
                    }
                }
            }
            group.addTask {
                let rescuer = Rescuer(driver: self.driver, logger: self.logger)
                await repeatEvery(max(self.configuration.lease / 2, .seconds(1))) {
                    if await rescuer.runOnce() > 0 { self.wake(backlog: true) }
                }
            }
            // Returns when SIGTERM/SIGINT arrive (or the task is cancelled).
            try? await gracefulShutdown()
            await drain()
            subscription.unsubscribe()
            group.cancelAll()
        }
        try? await driver.workerStop(id: id)
        logger.info("worker stopped")
    }

    // MARK: Claiming

    private func wake(backlog: Bool = false) {
        if backlog { state.withLock { $0.backlog = true } }
        wakeContinuation.yield()
    }

    private func produce() async {
        var failureDelay = Duration.milliseconds(100)
        for await _ in wakeups {
            if state.withLock({ $0.stopping }) { return }
            guard mayClaim() else { continue }
            // Back-pressure: let the outcome writer catch up before taking more work.
            while await recorder.pendingCount > 20_000 { try? await Task.sleep(for: .milliseconds(5)) }
            let slots = state.withLock { state in
                state.free.filter { $0.value > 0 }.mapValues { min($0, configuration.maxClaimBatch) }
            }
            guard !slots.isEmpty else { continue }
            do {
                // The driver hands over what each of its statements claims as it comes.
                var firstOfWake = true
                let claimed = try await driver.jobClaim(ClaimRequest(
                    owner: id, lease: configuration.lease, slots: slots, queues: configuration.queues, limitedKinds: limitedKinds,
                    frontiers: frontiers
                )) { jobs in
                    start(jobs, requested: slots, firstOfWake: firstOfWake)
                    firstOfWake = false
                }
                if firstOfWake { start([], requested: slots, firstOfWake: true) }
                logger.trace("claimed", metadata: [
                    "count": "\(claimed.jobs.count)", "requested": "\(slots.values.reduce(0, +))",
                    "held_back": "\(claimed.heldBack.map(\.rawValue))",
                ])
                // A limit left due jobs waiting: claim again when a slot may have freed.
                if slots.keys.contains(where: limitedKinds.contains) { state.withLock { $0.heldBack = !claimed.heldBack.isEmpty } }
                failureDelay = .milliseconds(100)
            } catch {
                logger.error("claim failed; retrying", metadata: ["error": "\(error)"])
                try? await Task.sleep(for: failureDelay)
                failureDelay = min(failureDelay * 2, .seconds(5))
                wake()
            }
        }
    }

    /// Starts what one of a claim's statements returned. `firstOfWake`: the wake's first, which
    /// decides `backlog` anew; a later one can only add to it.
    private func start(_ jobs: [ClaimedJob], requested: [JobKind: Int], firstOfWake: Bool) {
        var claimed: [JobKind: Int] = [:]
        for job in jobs { claimed[job.kind, default: 0] += 1 }
        for (kind, count) in claimed { metrics.claimed(kind, count: count) }
        state.withLock { state in
            // A kind that filled every slot asked for probably has more waiting.
            let filled = requested.contains { claimed[$0.key, default: 0] == $0.value }
            state.backlog = filled || (!firstOfWake && state.backlog)
            for job in jobs {
                state.free[job.kind, default: 0] -= 1
                if var earlier = state.running[job.id] {
                    // Claimed again: the earlier attempt's lease is gone for sure.
                    earlier.disposition = .leaseLost
                    earlier.task.cancel()
                    state.superseded[AttemptKey(id: job.id, attempt: earlier.job.attempt)] = earlier
                }
                state.running[job.id] = RunningJob(job: job, task: Task { await self.execute(job) })
            }
        }
    }

    // MARK: Running

    private func execute(_ job: ClaimedJob) async {
        var logger = self.logger
        logger[metadataKey: "job_id"] = "\(job.id)"
        logger[metadataKey: "kind"] = "\(job.kind)"
        logger[metadataKey: "attempt"] = "\(job.attempt)"
        let context = JobContext(logger: logger, workerID: id, queue: JobQueue(driver: driver, knownKinds: nil))
        let attempt = { [self] () async -> JobOutcome.Kind? in
            let started = ContinuousClock.now
            let result: Result<JSONValue?, any Error>
            do {
                guard let handler = handlers[job.kind] else { throw JobError.permanent(code: .unknownKind, message: "no handler for \(job.kind)") }
                result = .success(try await handler.run(job, context: context))
            } catch {
                result = .failure(error)
            }
            metrics.ran(job.kind, for: ContinuousClock.now - started)
            return await finish(job, result, endedByHandler: context.endedByHandler.outcome(answering: result), logger: logger)
        }
        if let tracer {
            await JobSpans.run(job, claimedAt: Date(), tracer: tracer, attempt)
        } else {
            _ = await attempt()
        }
    }

    /// Records the attempt's outcome, then frees its slot; returns the outcome (nil when none was
    /// recorded). The job stays in `running` until its outcome is queued for writing, so a drain
    /// that sees `running` empty misses nothing. `endedByHandler`: the outcome its handler wrote
    /// in its own transaction (`JobContext.end`), written by nothing else.
    private func finish(
        _ job: ClaimedJob, _ result: Result<JSONValue?, any Error>, endedByHandler: JobOutcome.Kind?, logger: Logger
    ) async -> JobOutcome.Kind? {
        let key = AttemptKey(id: job.id, attempt: job.attempt)
        let found: (disposition: Disposition, superseded: Bool)? = state.withLock { state in
            if state.superseded.removeValue(forKey: key) != nil {
                // Claimed again while it ran: its lease is gone, it records nothing and frees its slot.
                state.free[job.kind, default: 0] += 1
                return (.leaseLost, true)
            }
            guard let entry = state.running[job.id], entry.job.attempt == job.attempt, !entry.finishing else { return nil }
            state.running[job.id]?.finishing = true
            return (entry.disposition, false)
        }
        // nil: shutdown already handed the job back.
        guard let found else { return .returned }
        if found.superseded {
            if state.withLock({ $0.backlog }) { wake() }
            return outcome(of: job, .leaseLost, result, logger: logger)
        }
        let recorded: JobOutcome.Kind?
        if let endedByHandler {
            // Committed with the handler's writes, which released its lease: whatever a heartbeat
            // made of that since (lost, to it), the job ended as its handler said.
            log(endedByHandler, of: job, logger: logger)
            recorded = endedByHandler
        } else {
            recorded = outcome(of: job, found.disposition, result, logger: logger)
            if case .runAfter(let jobs)? = recorded {
                await runAfter(job, jobs, logger: logger)
            } else if let recorded {
                await recorder.record(JobOutcome(jobID: job.id, attempt: job.attempt, kind: recorded))
            }
        }
        let backlog = state.withLock { state in
            // Claimed again while its outcome was recorded (then refused by the compare-and-set),
            // it waits among the superseded.
            if state.running[job.id]?.job.attempt == job.attempt {
                state.running.removeValue(forKey: job.id)
            } else {
                state.superseded.removeValue(forKey: key)
            }
            state.free[job.kind, default: 0] += 1
            return state.backlog
        }
        if backlog { wake() }
        return recorded
    }

    private func outcome(
        of job: ClaimedJob, _ disposition: Disposition, _ result: Result<JSONValue?, any Error>, logger: Logger
    ) -> JobOutcome.Kind? {
        let outcome: JobOutcome.Kind
        switch (disposition, result) {
        case (.leaseLost, _):
            logger.warning("job abandoned: its lease was lost")
            return nil
        case (_, .success(let value)):
            outcome = completion(of: job, result: value?.jsonText)
        case (.cancelRequested, .failure):
            outcome = .cancelled
        case (.shutdown, .failure):
            outcome = .returned
        case (.normal, .failure(let error)):
            outcome = failure(of: job, error)
        }
        log(outcome, of: job, logger: logger)
        return outcome
    }

    /// Completed with its result, or dead when the result is over `JobResultLimit.maxBytes`.
    private func completion(of job: ClaimedJob, result: String?) -> JobOutcome.Kind {
        do {
            if let result { try JobResultLimit.check(result) }
            return .completed(result: result)
        } catch {
            return failure(of: job, error)
        }
    }

    /// Writes a `JobDeferral.runAfter` at once, in its own transaction (it locks the jobs waited
    /// for, which a batch of other outcomes should not wait on). When the database refuses, the
    /// job is deferred briefly instead: its handler looks again for what it waits for.
    private func runAfter(_ job: ClaimedJob, _ jobs: [Int64], logger: Logger) async {
        do {
            if try await driver.jobRunAfter(id: job.id, attempt: job.attempt, owner: id, jobs: jobs) { return }
            logger.warning("deferral discarded: the job is no longer leased to this worker")
        } catch {
            logger.error("could not make the job wait; deferring it instead", metadata: ["error": "\(error)"])
            let outcome = JobOutcome.Kind.deferred(error: "could not wait for jobs \(jobs): \(error)", code: nil, retryIn: configuration.retry.base)
            await recorder.record(JobOutcome(jobID: job.id, attempt: job.attempt, kind: outcome))
        }
    }

    private func failure(of job: ClaimedJob, _ error: any Error) -> JobOutcome.Kind {
        if case JobError.permanent(let code, let message) = error { return .dead(error: message, code: code) }
        switch error as? JobDeferral {
        case .runAfter(let jobs, _)?: return .runAfter(jobs: jobs)
        case .retryIn(let delay, let code, let reason)?: return .deferred(error: reason, code: code, retryIn: delay)
        case nil: break
        }
        let message = (error as? JobError)?.description ?? describe(error)
        let code = (error as? any CodedError)?.code
        if job.attempt >= job.maxAttempts { return .dead(error: message, code: code) }
        return .retry(error: message, code: code, retryIn: configuration.retry.delay(after: job.attempt))
    }

    private func log(_ outcome: JobOutcome.Kind, of job: ClaimedJob, logger: Logger) {
        let label: WorkerMetrics.Outcome
        switch outcome {
        case .completed: label = .completed; logger.debug("job completed")
        case .retry(let error, _, let wait):
            label = .retry; logger.warning("job failed; will retry", metadata: ["error": "\(error)", "retry_in_s": "\(wait.seconds)"])
        case .dead(let error, let code):
            label = .dead; logger.error("job dead", metadata: ["error": "\(error)", "code": "\(code?.rawValue ?? "-")"])
        case .cancelled: label = .cancelled; logger.info("job cancelled")
        case .returned: label = .returned; logger.info("job handed back to the queue")
        case .deferred(let error, let code, let wait):
            label = .deferred
            logger.info("job deferred; its attempt not counted", metadata: [
                "reason": "\(error)", "code": "\(code?.rawValue ?? "-")", "retry_in_s": "\(wait.seconds)",
            ])
        case .runAfter(let jobs): label = .deferred; logger.info("job deferred until other jobs end", metadata: ["after": "\(jobs)"])
        }
        metrics.finished(job.kind, label)
    }

    // MARK: Leases and cancellation

    private func heartbeat() async {
        let running = state.withLock { Array($0.running.keys) }
        let held = (running + (await recorder.pendingIDs)).sorted()
        do {
            let renewal = try await driver.jobExtendLeases(owner: id, ids: held, lease: configuration.lease)
            let lost = Set(running).subtracting(renewal.kept)
            for jobID in lost { interrupt(jobID, as: .leaseLost) }
            for jobID in renewal.cancelRequested { interrupt(jobID, as: .cancelRequested) }
        } catch {
            logger.error("heartbeat failed", metadata: ["error": "\(error)"])
        }
    }

    private func interrupt(_ jobID: Int64, as disposition: Disposition) {
        state.withLock { state in
            guard let entry = state.running[jobID], entry.disposition == .normal else { return }
            state.running[jobID]?.disposition = disposition
            entry.task.cancel()
        }
    }

    private func consumeNotifications(_ events: AsyncStream<NotifierEvent>) async {
        for await event in events {
            switch event {
            case .mightHaveMissed:
                logger.trace("woken: notifications may have been missed")
                wake(backlog: true)
            case .notification(QueueChannel.jobs.name, let payload):
                logger.trace("woken: jobs enqueued", metadata: ["kind": "\(payload)"])
                if let kind = QueueChannel.jobs.decode(payload), handlers[kind] != nil { wake(backlog: true) }
            case .notification(QueueChannel.finished.name, _):
                if state.withLock({ $0.heldBack }) { wake() }
            case .notification(QueueChannel.control.name, let payload):
                switch QueueChannel.control.decode(payload) {
                case .limits?:
                    wake(backlog: true)
                case .cancel(let jobID, let owner)?:
                    if owner == id { interrupt(jobID, as: .cancelRequested) }
                case .pauses?:
                    // Each claim reads the pauses; a resume wakes the kinds it frees on `jobs`.
                    break
                case nil:
                    logger.warning("control notification of an unknown shape ignored", metadata: ["payload": "\(payload.prefix(200))"])
                }
            case .notification(let channel, _):
                logger.debug("notification on an unexpected channel ignored", metadata: ["channel": "\(channel)"])
            }
        }
    }

    // MARK: Shutdown

    /// Polls `condition` on the state until it is false or `deadline` passes; a cancelled
    /// task (a hard stop) does not wait at all.
    private func waitWhile(until deadline: ContinuousClock.Instant, _ condition: (borrowing State) -> Bool) async {
        while !Task.isCancelled && ContinuousClock.now < deadline && state.withLock({ condition($0) }) {
            try? await Task.sleep(for: .milliseconds(10))
        }
    }

    private func drain() async {
        state.withLock { $0.stopping = true }
        wakeContinuation.finish()
        let clock = ContinuousClock()
        let deadline = clock.now + configuration.shutdownGrace
        let inFlight = state.withLock { $0.running.count }
        logger.info("draining", metadata: ["running": "\(inFlight)", "grace_s": "\(configuration.shutdownGrace.seconds)"])
        await waitWhile(until: deadline) { $0.running.isEmpty == false }
        // Past the grace period: stop the rest and hand them back.
        let late = state.withLock { state in state.running.keys.map { $0 } }
        late.forEach { interrupt($0, as: .shutdown) }
        let windDown = clock.now + .seconds(1)
        await waitWhile(until: windDown) { $0.running.isEmpty == false }
        // Handlers that ignore cancellation are abandoned; their jobs go back all the same.
        let stuck = state.withLock { state in
            let stuck = state.running.values.filter { !$0.finishing }.map(\.job)
            for job in stuck { state.running[job.id]?.finishing = true }
            return stuck
        }
        for job in stuck { await recorder.record(JobOutcome(jobID: job.id, attempt: job.attempt, kind: .returned)) }
        // Outcomes being recorded right now land in the recorder within moments.
        let stuckIDs = Set(stuck.map(\.id))
        await waitWhile(until: windDown + .seconds(1)) { $0.running.keys.contains { !stuckIDs.contains($0) } }
        await recorder.drain()
        if !late.isEmpty { logger.warning("handed back unfinished jobs", metadata: ["count": "\(late.count)"]) }
    }
}
