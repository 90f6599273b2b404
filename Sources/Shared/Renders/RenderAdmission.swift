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
    private let queue: JobQueue
    private let interval: Duration
    private let maxAge: Duration
    private let logger: Logger
    private let ledger: Mutex<AdmissionLedger<Waiter>>
    private let demands: AsyncStream<Void>
    private let demandsInput: AsyncStream<Void>.Continuation

    /// `maxAge` zero: every request waits for a read started after it arrived (tests that
    /// change the load between requests).
    public init(
        pool: PostgresPool, interval: Duration = RenderAdmission.defaultInterval,
        maxAge: Duration = RenderAdmission.defaultMaxAge, logger: Logger = Logger(label: "fleet.render-admission")
    ) {
        self.pool = pool
        self.queue = JobQueue(driver: PostgresQueueDriver(executor: pool), knownKinds: nil)
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
            for await _ in self.demands {
                await self.refresh()
                try? await Task.sleep(for: self.interval)
                if Task.isCancelled { break }
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

    /// Admits a render due by `deadline` on the current estimate or throws `RenderRequestError.busy`; an admitted
    /// render's `Ticket` goes back through `ended` when its transaction ends, committed or not.
    public func admit(inputWait: Duration, deadline: Duration) throws -> Ticket {
        switch ledger.withLock({ $0.admit(inputWait: inputWait, deadline: deadline) }) {
        case .admitted(let counted): return Ticket(counted: counted)
        case .refused(let seconds): throw RenderRequestError.busy(retryAfterSeconds: seconds)
        }
    }

    /// A limit was changed through this process: the next request decides on a read started
    /// after the change (other dispatchers see it with their next read).
    public func limitsChanged() {
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

    private func refresh() async {
        let read = ledger.withLock { $0.readStarted(at: .now) }
        do {
            let estimate = try await Self.read(from: pool, queue: queue)
            for waiter in ledger.withLock({ $0.readEnded(read, with: estimate) }) { waiter.resume(returning: estimate) }
        } catch {
            logger.warning("render admission: the provider's load was not read", metadata: ["error": "\(error)"])
            for waiter in ledger.withLock({ $0.readFailed(read) }) { waiter.resume(throwing: error) }
        }
    }

    /// The settings, then for their provider: its rule and load, its recent run time, and the
    /// input kinds' recent run times.
    static func read(from pool: PostgresPool, queue: JobQueue) async throws -> AdmissionEstimate {
        let settings = try await RenderSettings.load(from: pool)
        let provider = settings.provider
        let latency = try await pool.query("SELECT seconds FROM provider_latency WHERE provider = $1", [provider]).rows.first
            .map { Duration.seconds(try $0.double("seconds")) }
        let load = try await ConcurrencyLimits(executor: pool).load(key: RenderCapacity.providerKey(provider), kind: .renderRun)
        return AdmissionEstimate(settings: settings, load: load, latency: latency, inputRunTimes: try await queue.recentRunTimes(of: RenderInputs.kinds))
    }
}
