import FleetQueue
import FleetStorage
import FleetSupport
import Imaging
import Logging
import Providers

/// Fails renders still open past their deadline (their worker died, or none started them)
/// with `RENDER_TIMEOUT`, releasing their credits, then asks the provider to drop the job a
/// dead worker left running there (billed otherwise), as the worker does on its own timeout.
/// A worker that comes back later finds the render ended and leaves it so. The job of a render
/// no worker started (still waiting for its inputs) is cancelled, so it never runs: nothing is
/// sent to a provider after the deadline.
public struct RenderTimeoutSweeper: Sendable {
    /// Open renders past their deadline fail with `RENDER_TIMEOUT`, credit released.
    public static let task = MaintenanceTask(rawValue: "renders.timeout")
    let store: RenderStore
    let providers: ProviderCatalog
    let logger: Logger

    public init(store: RenderStore, providers: ProviderCatalog, logger: Logger) {
        self.store = store
        self.providers = providers
        self.logger = logger
    }

    /// Returns the ids of the renders it ended: timed out, then abandoned (`failAbandoned`).
    @discardableResult
    public func runOnce(limit: Int = 1000) async throws -> [StorageID] {
        let queue = JobQueue(executor: store.pool, knownKinds: nil)
        let timedOut = try await failExpired(limit: limit, queue: queue)
        return timedOut + (try await failAbandoned(limit: limit, queue: queue))
    }

    private func failExpired(limit: Int, queue: JobQueue) async throws -> [StorageID] {
        let ended = try await store.failExpired(limit: limit)
        for render in ended { RenderMetrics.sweptFailed(render, .timeout) }
        if !ended.isEmpty {
            logger.warning("renders timed out", metadata: ["count": "\(ended.count)", "render_ids": "\(ended.prefix(20).map(\.id))"])
        }
        for job in ended.compactMap(\.unstartedJobID) {
            // Best effort: a job left waiting finds its render ended when it runs, and ends too.
            do { _ = try await queue.cancel(id: job) } catch {
                logger.warning("job of a timed-out render not cancelled", metadata: ["job_id": "\(job)", "error": "\(error)"])
            }
        }
        // Not awaited: a provider slow to answer (up to the cancel's own timeout) must not hold
        // up the next sweep of this schedule entry.
        if ended.contains(where: { $0.submission != nil }) { Task { await cancelAtProviders(ended) } }
        return ended.map(\.id)
    }

    /// Renders no worker started whose job ended without running them fail `RENDER_FAILED` at
    /// once, credit released, rather than at their deadline: an input that failed for good
    /// cancelled the job with `DEPENDENCY_FAILED` (`IMAGE_INVALID` when the upload is not a usable
    /// image, else `INPUT_FAILED`), or an operator cancelled it (`CANCELLED`). Nothing would run
    /// them again.
    private func failAbandoned(limit: Int, queue: JobQueue) async throws -> [StorageID] {
        let unstarted = try await store.unstartedRenderJobs(limit: limit)
        guard !unstarted.isEmpty else { return [] }
        let states = try await queue.states(of: Array(unstarted.values))
        var failed: [StorageID] = []
        for (render, job) in unstarted.sorted(by: { $0.key.value < $1.key.value }) where states[job] == .cancelled || states[job] == .dead {
            let failure = try await AbandonedRender.failure(ofJob: job, queue: queue)
            guard let ended = try await store.failRender(id: render, failure: failure) else { continue }
            failed.append(render)
            RenderMetrics.sweptFailed(ended, failure.code)
        }
        if !failed.isEmpty {
            logger.warning("renders whose job ended without running them failed", metadata: ["render_ids": "\(failed.prefix(20))"])
        }
        return failed
    }

    /// After the sweep's commit, best effort: a provider that cannot be reached or made (no key
    /// in this process) leaves the job to run out there, logged.
    private func cancelAtProviders(_ ended: [RenderStore.Ended]) async {
        await withTaskGroup(of: Void.self) { group in
            for render in ended {
                guard let submission = render.submission, !submission.state.isSettled else { continue }
                group.addTask {
                    do {
                        try await providers.provider(named: render.provider).cancel(submission)
                        logger.info("provider job of a timed-out render cancelled",
                                    metadata: ["render_id": "\(render.id)", "provider_job_id": "\(submission.jobID)"])
                    } catch {
                        logger.warning("provider job of a timed-out render not cancelled",
                                       metadata: ["render_id": "\(render.id)", "error": "\(error)"])
                    }
                }
            }
        }
    }
}

/// Why a render's job ended without running it, from the job's last error and, when an input it
/// ran after failed, that input's.
enum AbandonedRender {
    /// The image jobs' codes that are a verdict on the person's upload, not a fault of the fleet.
    static let refusedUploadCodes: Set<JobErrorCode> = [.imageInvalid, .imageTooLarge, .imageUnsupported]

    static func failure(ofJob id: Int64, queue: JobQueue) async throws -> RenderFailure {
        guard let job = try await queue.job(id: id) else { return RenderFailure(.internalError, "its render.run job \(id) is gone") }
        let last = job.errors.last
        guard last?.code == JobErrorCode.dependencyFailed.rawValue else {
            return job.state == .cancelled
                ? RenderFailure(.cancelled, "its render.run job \(id) was cancelled before it ran")
                : RenderFailure(.internalError, "its render.run job \(id) ended \(job.state.rawValue): \(last?.error ?? "no error recorded")")
        }
        for input in job.dependsOn {
            guard let record = try await queue.job(id: input), record.state == .dead || record.state == .cancelled else { continue }
            let error = record.errors.last
            let code: RenderFailureCode = error?.code.map { refusedUploadCodes.contains(JobErrorCode(rawValue: $0)) } == true ? .imageInvalid : .inputFailed
            return RenderFailure(code, "its input \(record.kind) (job \(input)) failed: \(error.map { "\($0.code ?? "error"): \($0.error)" } ?? record.state.rawValue)")
        }
        return RenderFailure(.inputFailed, "an input it ran after failed: \(last?.error ?? "")")
    }
}
