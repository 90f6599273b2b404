import FleetPostgres
import FleetSupport
import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import Tracing

/// Runs registered handlers on jobs claimed from the queue: claims sized to free slots,
/// leases renewed by heartbeat, outcomes written in batches, wake-ups by LISTEN/NOTIFY (a
/// subscription to the process's `Notifier`) with a jittered poll as the guarantee, and expired
/// leases rescued (by the fleet's elected worker, `MaintenanceLeader`). Its bookkeeping is a
/// value (`WorkerState`) whose methods say what to do; the runtime does it. On graceful shutdown it
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
    /// The bookkeeping (`WorkerState`): every change to it is one of its methods, under this lock;
    /// the runtime performs what they return outside it.
    private let state: Mutex<State>
    /// Where this worker's claims start in the claim index, per kind.
    private let frontiers: ClaimFrontiers
    private let wakeups: AsyncStream<Void>
    private let wakeContinuation: AsyncStream<Void>.Continuation
    /// Whether the worker may claim now: false while what its jobs need is down (the image store,
    /// `StorageReadiness`); the poll asks again.
    private let mayClaim: @Sendable () -> Bool

    private typealias State = WorkerState<Task<Void, Never>>

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
        let concurrency = Dictionary(uniqueKeysWithValues: self.handlers.keys.map { ($0, configuration.concurrency[$0] ?? 1) })
        self.state = Mutex(State(concurrency: concurrency, limitedKinds: limitedKinds, maxClaimBatch: configuration.maxClaimBatch))
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
            "concurrency": "\(state.withLock { $0.capacity.map { "\($0.key)=\($0.value)" }.sorted() })",
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
            group.addTask { await self.rescueWhileLeading() }
            // Returns when SIGTERM/SIGINT arrive (or the task is cancelled).
            try? await gracefulShutdown()
            await drain()
            subscription.unsubscribe()
            group.cancelAll()
        }
        try? await driver.workerStop(id: id)
        logger.info("worker stopped")
    }

    /// Every half lease, the lease rescue, on the fleet's one leader (`MaintenanceLeader`).
    private func rescueWhileLeading() async {
        let period = max(configuration.lease / 2, .seconds(1))
        let leader = MaintenanceLeader(notifier: notifier, period: period, logger: logger)
        let rescuer = Rescuer(driver: driver, logger: logger)
        await repeatEvery(period) {
            guard leader.leads() else { return }
            let rescued = await rescuer.runOnce()
            logger.trace("lease rescue ran", metadata: ["rescued": "\(rescued)"])
            if rescued > 0 { wake(backlog: true) }
        }
    }

    // MARK: Claiming

    private func wake(backlog: Bool = false) {
        if backlog { state.withLock { $0.workMayBeWaiting() } }
        wakeContinuation.yield()
    }

    private func produce() async {
        var failureDelay = Duration.milliseconds(100)
        for await _ in wakeups {
            if state.withLock({ $0.isStopping }) { return }
            guard mayClaim() else { continue }
            // Back-pressure: let the outcome writer catch up before taking more work.
            while await recorder.pendingCount > 20_000 { try? await Task.sleep(for: .milliseconds(5)) }
            let slots: [JobKind: Int]
            switch state.withLock({ $0.claimBegins() }) {
            case .claim(let reserved): slots = reserved
            case .noFreeSlot: continue
            case .stop: return
            }
            // Jobs to give back unrun: the shutdown began while the claim was in flight.
            var handBack: [ClaimedJob] = []
            do {
                // The driver hands over what each of its statements claims as it comes.
                let claimed = try await driver.jobClaim(ClaimRequest(
                    owner: id, lease: configuration.lease, slots: slots, queues: configuration.queues, limitedKinds: limitedKinds,
                    frontiers: frontiers
                )) { jobs in
                    handBack += start(jobs)
                }
                await hand(back: handBack)
                state.withLock { $0.claimEnded(heldBack: claimed.heldBack) }
                logger.trace("claimed", metadata: [
                    "count": "\(claimed.jobs.count)", "requested": "\(slots.values.reduce(0, +))",
                    "held_back": "\(claimed.heldBack.map(\.rawValue))",
                ])
                failureDelay = .milliseconds(100)
            } catch {
                await hand(back: handBack)
                state.withLock { $0.claimEnded(heldBack: nil) }
                logger.error("claim failed; retrying", metadata: ["error": "\(error)"])
                try? await Task.sleep(for: failureDelay)
                failureDelay = min(failureDelay * 2, .seconds(5))
                wake()
            }
        }
    }

    /// Starts what one of a claim's statements returned; returns the jobs to hand back.
    private func start(_ jobs: [ClaimedJob]) -> [ClaimedJob] {
        var claimed: [JobKind: Int] = [:]
        for job in jobs { claimed[job.kind, default: 0] += 1 }
        for (kind, count) in claimed { metrics.claimed(kind, count: count) }
        var runs: [(ClaimedJob, Task<Void, Never>)] = []
        var handBack: [ClaimedJob] = []
        for action in state.withLock({ $0.claimed(jobs) }) {
            switch action {
            case .start(let job): runs.append((job, Task { await self.execute(job) }))
            case .cancel(let task): task.cancel()
            case .handBack(let job): handBack.append(job)
            }
        }
        let stopAtOnce = state.withLock { state in runs.compactMap { state.started($0.0, $0.1) } }
        for task in stopAtOnce { task.cancel() }
        return handBack
    }

    /// Gives `jobs` back to the queue unrun, their attempt not counted.
    private func hand(back jobs: [ClaimedJob]) async {
        for job in jobs { await recorder.record(JobOutcome(jobID: job.id, attempt: job.attempt, kind: .returned)) }
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
        let disposition: JobDisposition
        switch state.withLock({ $0.ending(job) }) {
        case .record(let how):
            disposition = how
        case .lost(let claimAgain):
            // Claimed again while it ran: its lease is gone, it records nothing.
            if claimAgain { wake() }
            return outcome(of: job, .leaseLost, result, logger: logger)
        case .handedBack:
            return .returned
        }
        let recorded: JobOutcome.Kind?
        if let endedByHandler {
            // Committed with the handler's writes, which released its lease: whatever a heartbeat
            // made of that since (lost, to it), the job ended as its handler said.
            log(endedByHandler, of: job, logger: logger)
            recorded = endedByHandler
        } else {
            recorded = outcome(of: job, disposition, result, logger: logger)
            if case .runAfter(let jobs)? = recorded {
                await runAfter(job, jobs, logger: logger)
            } else if let recorded {
                await recorder.record(JobOutcome(jobID: job.id, attempt: job.attempt, kind: recorded))
            }
        }
        if state.withLock({ $0.ended(job) }) { wake() }
        return recorded
    }

    private func outcome(
        of job: ClaimedJob, _ disposition: JobDisposition, _ result: Result<JSONValue?, any Error>, logger: Logger
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
        let running = state.withLock { $0.runningIDs }
        let held = (running + (await recorder.pendingIDs)).sorted()
        do {
            let renewal = try await driver.jobExtendLeases(owner: id, ids: held, lease: configuration.lease)
            let interrupted = state.withLock { $0.leasesRenewed(asked: running, kept: renewal.kept, cancelRequested: renewal.cancelRequested) }
            for task in interrupted { task.cancel() }
        } catch {
            logger.error("heartbeat failed", metadata: ["error": "\(error)"])
        }
    }

    private func interrupt(_ jobID: Int64, as disposition: JobDisposition) {
        state.withLock { $0.interrupt(jobID, as: disposition) }?.cancel()
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
        let inFlight = state.withLock { state in
            state.stop()
            return state.runningCount
        }
        wakeContinuation.finish()
        let clock = ContinuousClock()
        let deadline = clock.now + configuration.shutdownGrace
        logger.info("draining", metadata: ["running": "\(inFlight)", "grace_s": "\(configuration.shutdownGrace.seconds)"])
        await waitWhile(until: deadline) { !$0.isDrained }
        // Past the grace period: stop the rest and hand them back.
        let (late, interrupted) = state.withLock { ($0.runningCount, $0.graceEnded()) }
        for task in interrupted { task.cancel() }
        let windDown = clock.now + .seconds(1)
        await waitWhile(until: windDown) { !$0.isDrained }
        // Handlers that ignore cancellation are abandoned; their jobs go back all the same.
        await hand(back: state.withLock { $0.abandonStuck() })
        // Outcomes being recorded right now land in the recorder within moments.
        await waitWhile(until: windDown + .seconds(1)) { !$0.onlyAbandonedLeft }
        await recorder.drain()
        if late > 0 { logger.warning("handed back unfinished jobs", metadata: ["count": "\(late)"]) }
    }
}
