import Logging

/// Writes attempt outcomes in batches. While one batch is in flight the next one gathers,
/// so under load one statement records thousands of outcomes and when idle an outcome
/// goes out at once. A failed write is kept and retried: outcomes are not lost to a
/// database restart.
actor OutcomeRecorder {
    private let driver: PostgresQueueDriver
    private let owner: String
    private let logger: Logger
    private let maxBatch: Int
    private var buffer: [JobOutcome] = []
    private var inFlight: [JobOutcome] = []
    private var flushing = false
    private var idleWaiters: [CheckedContinuation<Void, Never>] = []

    init(driver: PostgresQueueDriver, owner: String, logger: Logger, maxBatch: Int = 5_000) {
        self.driver = driver
        self.owner = owner
        self.logger = logger
        self.maxBatch = maxBatch
    }

    func record(_ outcome: JobOutcome) {
        buffer.append(outcome)
        guard !flushing else { return }
        flushing = true
        Task { await flushLoop() }
    }

    /// Outcomes not yet written: their jobs are still leased to this worker.
    var pendingIDs: [Int64] { (inFlight + buffer).map(\.jobID) }
    var pendingCount: Int { inFlight.count + buffer.count }

    /// Returns once everything recorded so far is written.
    func drain() async {
        guard flushing else { return }
        await withCheckedContinuation { idleWaiters.append($0) }
    }

    private func flushLoop() async {
        var delay = Duration.milliseconds(100)
        while !buffer.isEmpty {
            // In id order, as the heartbeat locks them, so the two never deadlock on each other.
            inFlight = buffer.prefix(maxBatch).sorted { $0.jobID < $1.jobID }
            buffer.removeFirst(inFlight.count)
            do {
                let applied = try await driver.jobFinishMany(owner: owner, outcomes: inFlight)
                for outcome in inFlight where !applied.contains(outcome.jobID) {
                    logger.warning("outcome discarded: the job is no longer leased to this worker",
                                   metadata: ["job_id": "\(outcome.jobID)", "attempt": "\(outcome.attempt)"])
                }
                inFlight = []
                delay = .milliseconds(100)
            } catch {
                logger.error("recording outcomes failed; retrying", metadata: ["error": "\(error)", "count": "\(inFlight.count)"])
                buffer.insert(contentsOf: inFlight, at: 0)
                inFlight = []
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(2))
            }
        }
        flushing = false
        idleWaiters.forEach { $0.resume() }
        idleWaiters = []
    }
}
