import FleetPostgres
import FleetQueue
import Logging
import ServiceLifecycle
import Synchronization

/// Render admission (`RENDER_BUSY`, docs/renders.md "Provider capacity") from an estimate kept
/// in memory: one read of the settings and the active provider's load every `interval` while
/// requests come, instead of reads in every request. A refused request reads nothing; an
/// admitted one counts among the renders ahead of the next at once (`AdmissionLedger`).
///
/// One per dispatcher, started before the server. A request waits for a read only when the
/// estimate is older than `maxAge` (the first request after a quiet spell, or reads falling
/// behind): the estimate's lag is otherwise the pause plus one read.
public final class RenderAdmission: Service {
    /// The pause between reads while requests come.
    public static let defaultInterval = Duration.milliseconds(10)
    /// How old an estimate may be and still be decided on.
    public static let defaultMaxAge = Duration.milliseconds(250)

    /// The service stopped (the dispatcher is shutting down): nothing is admitted.
    public struct Stopped: Error, CustomStringConvertible {
        public var description: String { "render admission stopped: the dispatcher is shutting down" }
    }

    /// An admitted render, to report with `ended` once its transaction ends.
    public struct Ticket: Sendable {
        let counted: Bool
    }

    private typealias Waiter = CheckedContinuation<AdmissionEstimate, any Error>

    private let pool: PostgresPool
    /// Where pauses and limit changes made through any dispatcher are heard (`fleet_control`).
    private let notifier: Notifier?
    private let queue: JobQueue
    private let control: JobControl
    private let interval: Duration
    private let maxAge: Duration
    private let logger: Logger
    private let ledger: Mutex<AdmissionLedger<Waiter>>
    private let demands: AsyncStream<Void>
    private let demandsInput: AsyncStream<Void>.Continuation

    /// `maxAge` zero: every request waits for a read started after it arrived (tests that
    /// change the load between requests). `notifier`: the process's LISTEN connection; with it, a
    /// request after a pause, a resume or a limit change through any dispatcher waits for a read
    /// started after it was heard, rather than deciding on an estimate up to `maxAge` old.
    public init(
        pool: PostgresPool, notifier: Notifier? = nil, interval: Duration = RenderAdmission.defaultInterval,
        maxAge: Duration = RenderAdmission.defaultMaxAge, logger: Logger = Logger(label: "fleet.render-admission")
    ) {
        self.pool = pool
        self.notifier = notifier
        queue = JobQueue(executor: pool, knownKinds: nil)
        control = JobControl(executor: pool)
        self.interval = interval
        self.maxAge = maxAge
        self.logger = logger
        ledger = Mutex(AdmissionLedger())
        (demands, demandsInput) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    /// Reads while requests come, pausing `interval` between reads; idle otherwise. Once it
    /// stops, requests are refused with `Stopped`.
    public func run() async {
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                if let notifier = self.notifier { group.addTask { await self.followControl(notifier) } }
                for await _ in self.demands {
                    await self.refresh()
                    try? await Task.sleep(for: self.interval)
                    if Task.isCancelled { break }
                }
                group.cancelAll()
            }
        }
        for waiter in ledger.withLock({ $0.stop() }) { waiter.resume(throwing: Stopped()) }
    }

    /// The current estimate: at once when fresh enough, else after the next read.
    public func estimate() async throws -> AdmissionEstimate {
        try await withCheckedThrowingContinuation { (waiter: Waiter) in
            let (lookUp, signal) = ledger.withLock { $0.lookUp(now: .now, maxAge: maxAge, waiter: waiter) }
            if signal { demandsInput.yield() }
            switch lookUp {
            case .estimate(let estimate): waiter.resume(returning: estimate)
            case .wait: break
            case .stopped: waiter.resume(throwing: Stopped())
            }
        }
    }

    /// Admits a render due by `deadline` that runs the kinds `needs` on the current estimate, or
    /// throws `RenderRequestError.busy` or `.paused`; an admitted render's `Ticket` goes back
    /// through `ended` when its transaction ends, committed or not.
    public func admit(inputWait: Duration, deadline: Duration, needs: Set<JobKind>) throws -> Ticket {
        let decision = ledger.withLock { $0.admit(inputWait: inputWait, deadline: deadline, needs: needs) }
        switch decision {
        case .admitted(let counted): return Ticket(counted: counted)
        case .refused(let seconds): throw RenderRequestError.busy(retryAfterSeconds: seconds)
        case .paused(let kinds, let seconds): throw RenderRequestError.paused(kinds: kinds, retryAfterSeconds: seconds)
        }
    }

    /// Refuses a render `admit` let in whose photos named by id are still being made by jobs of a
    /// paused kind (found in its transaction, `RenderInputs.pending`).
    public func refuseIfPaused(_ kinds: Set<JobKind>, deadline: Duration) throws {
        if case .paused(let paused, let seconds)? = ledger.withLock({ $0.pausedRefusal(needs: kinds, deadline: deadline) }) {
            throw RenderRequestError.paused(kinds: paused, retryAfterSeconds: seconds)
        }
    }

    /// A limit or a pause was changed through this process: the next request decides on a read
    /// started after the change (other dispatchers hear it on `fleet_control`).
    public func controlsChanged() {
        ledger.withLock { $0.changed(at: .now) }
    }

    /// Refuses a render `admit` let in when its inputs turn out to need `inputWait`: photos named
    /// by id that jobs are still making, found in its transaction (`RenderInputs.pending`).
    public func readmit(_ ticket: Ticket, inputWait: Duration, deadline: Duration) throws {
        if let seconds = ledger.withLock({ $0.readmits(inputWait: inputWait, deadline: deadline, counted: ticket.counted) }) {
            throw RenderRequestError.busy(retryAfterSeconds: seconds)
        }
    }

    public func ended(_ ticket: Ticket, committed: Bool) {
        ledger.withLock { $0.ended(counted: ticket.counted, committed: committed) }
    }

    /// Pauses, resumes and limit changes, wherever made: the next request waits for a read after.
    private func followControl(_ notifier: Notifier) async {
        let subscription = notifier.subscribe(to: [QueueChannel.control])
        defer { subscription.unsubscribe() }
        for await event in subscription.events {
            switch event {
            case .mightHaveMissed:
                ledger.withLock { $0.changed(at: .now) }
            case .notification(_, let payload):
                switch QueueChannel.control.decode(payload) {
                case .pauses?, .limits?: ledger.withLock { $0.changed(at: .now) }
                case .cancel?, nil: break
                }
            }
        }
    }

    private func refresh() async {
        let read = ledger.withLock { $0.readStarted(at: .now) }
        do {
            let estimate = try await Self.read(from: pool, queue: queue, control: control)
            for waiter in ledger.withLock({ $0.readEnded(read, with: estimate) }) { waiter.resume(returning: estimate) }
        } catch {
            logger.warning("render admission: the provider's load was not read", metadata: ["error": "\(error)"])
            for waiter in ledger.withLock({ $0.readFailed(read) }) { waiter.resume(throwing: error) }
        }
    }

    /// The settings, then for their provider: its rule and load, under a rule of running renders
    /// its renders in flight, its recent run time, the input kinds' recent run times, and which of
    /// the render's kinds are paused.
    static func read(from pool: PostgresPool, queue: JobQueue, control: JobControl) async throws -> AdmissionEstimate {
        let settings = try await RenderSettings.load(from: pool)
        let provider = settings.provider
        let latency = try await pool.query("SELECT seconds FROM provider_latency WHERE provider = $1", [provider]).rows.first
            .map { Duration.seconds(try $0.double("seconds")) }
        let load = try await ConcurrencyLimits(executor: pool).load(key: RenderCapacity.providerKey(provider), kind: .renderRun)
        let inFlight = load.rule?.maxRunning == nil
            ? RendersInFlight() : try await RendersInFlight.read(provider: provider, runningJobIDs: load.runningJobIDs, from: pool)
        let pauses = try await control.pauses().map(\.target)
        // Render jobs and their inputs go to the default queue (`NewJob`'s).
        let paused = ([.renderRun] + RenderInputs.kinds).filter { pauses.contains(.kind($0)) || pauses.contains(PauseTarget(scope: .queue, name: "default")) }
        return AdmissionEstimate(
            settings: settings, load: load, latency: latency, inputRunTimes: try await queue.recentRunTimes(of: RenderInputs.kinds),
            pausedKinds: Set(paused), inFlight: inFlight)
    }
}
