import DispatcherProtocol
import FleetQueue
import FleetSupport
import ServiceLifecycle
import Synchronization
import Tracing

/// Where the enqueueing ops send their one job: the queue itself, or the `EnqueueBatcher`.
public protocol JobEnqueuer: Sendable {
    func enqueue(_ job: NewJob) async throws -> EnqueuedJob
}

/// An enqueuer that can answer through a callback, called once from whichever task ends the
/// enqueue: a request then needs no task of its own while its job waits for its commit
/// (`EnqueueOperation.start`).
public protocol AnsweringEnqueuer: JobEnqueuer {
    func enqueue(_ job: NewJob, answer: @escaping @Sendable (Result<EnqueuedJob, any Error>) -> Void)
}

extension JobQueue: JobEnqueuer {}

/// Group commit for single enqueues: jobs enqueued at the same time, from any connection, share
/// one insert statement and one commit (`GroupCommitState` decides which), and each caller is
/// answered after that commit with its own id, `isNew` and error (`JobQueue.enqueueEach`). A
/// commit per job caps a dispatcher at the disk's flush rate; a commit per batch does not.
///
/// The commits run in this service's task group, not in the callers' tasks: a caller whose
/// client went away still has its job committed, and no caller's cancellation fails its
/// neighbours. Started before the server, it stops after it, when every answer has been given.
public final class EnqueueBatcher: AnsweringEnqueuer, Service {
    /// Rows per statement: the statement's arrays stay small, and a batch's commit short.
    public static let defaultMaxBatch = 512
    /// Commits running at once: each on its own pooled connection; PostgreSQL flushes their
    /// WAL together when they end together.
    public static let defaultMaxInFlight = 2

    private struct Waiter: Sendable {
        let job: NewJob
        let answer: @Sendable (Result<EnqueuedJob, any Error>) -> Void
        /// The request's trace context: its batch's statement runs in the first waiter's.
        let context: ServiceContext?
    }

    private let queue: JobQueue
    private let state: Mutex<GroupCommitState<Waiter>>
    /// Batches that start a slot, for `run` to commit.
    private let starts: AsyncStream<[Waiter]>
    private let startsInput: AsyncStream<[Waiter]>.Continuation
    /// Read once: without a tracer, the jobs carry no trace.
    private let traced = TracePropagation.isTracing

    public init(queue: JobQueue, maxBatch: Int = EnqueueBatcher.defaultMaxBatch, maxInFlight: Int = EnqueueBatcher.defaultMaxInFlight) {
        self.queue = queue
        state = Mutex(GroupCommitState(maxBatch: maxBatch, maxInFlight: maxInFlight))
        (starts, startsInput) = AsyncStream.makeStream()
    }

    /// Requests waiting for a slot (tests make batches with it).
    var waiting: Int { state.withLock { $0.waiting.count } }

    /// Answers after the commit that holds `job`; waits for it even when the caller is cancelled.
    public func enqueue(_ job: NewJob) async throws -> EnqueuedJob {
        try await withCheckedThrowingContinuation { continuation in
            enqueue(job) { continuation.resume(with: $0) }
        }
    }

    /// Calls `answer` after the commit that holds `job`, from the task that committed it.
    public func enqueue(_ job: NewJob, answer: @escaping @Sendable (Result<EnqueuedJob, any Error>) -> Void) {
        var job = job
        if traced { job.traceParent = TracePropagation.traceParent() }
        let context = traced ? ServiceContext.current : nil
        let start = state.withLock { $0.arrive(Waiter(job: job, answer: answer, context: context)) }
        guard let start else { return }
        if case .terminated = startsInput.yield(start) { refuseSlot(start) }
    }

    /// Commits each slot's batches until nothing waits for it; after a graceful shutdown, until
    /// the batches already started are answered.
    public func run() async {
        await withDiscardingTaskGroup { slots in
            await withGracefulShutdownHandler {
                for await start in starts {
                    slots.addTask { await self.runSlot(from: start) }
                }
            } onGracefulShutdown: {
                self.startsInput.finish()
            }
        }
        // Cancelled rather than shut down: later arrivals are refused, not left waiting.
        startsInput.finish()
    }

    private func runSlot(from start: [Waiter]) async {
        var batch: [Waiter]? = start
        while let waiters = batch {
            await commit(waiters)
            batch = state.withLock { $0.commitEnded() }
        }
    }

    private func commit(_ waiters: [Waiter]) async {
        let results = await ServiceContext.withValue(waiters[0].context ?? .topLevel) {
            await queue.enqueueEach(waiters.map(\.job))
        }
        for (waiter, result) in zip(waiters, results) { waiter.answer(result) }
    }

    /// A slot whose batches arrived after the service stopped: each is refused, as a stopped
    /// dispatcher would.
    private func refuseSlot(_ start: [Waiter]) {
        var batch: [Waiter]? = start
        while let waiters = batch {
            for waiter in waiters {
                waiter.answer(.failure(DispatcherError(.unavailable, "the dispatcher is shutting down; retry later")))
            }
            batch = state.withLock { $0.commitEnded() }
        }
    }
}
