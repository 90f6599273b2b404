import FleetHTTPClient
import FleetQueue
import FleetStorage
import FleetSupport
import Foundation
import Imaging
import Logging
import Providers
import ServiceLifecycle
import Synchronization
import Tracing

/// `render.run`: one render from `processing` to `complete` or `failed`, within its deadline.
///
/// The provider job is submitted once (once more after a 5xx or a dropped connection; never
/// after a refusal), its submission kept on the row so a worker taking over after a crash
/// asks for the same job instead of paying for a second one. The outcome comes from the
/// provider's callback (stored by the dispatcher, announced on `fleet_render_events`) or, when
/// that is late, from polling. Settlement (`RenderStore.complete`/`fail`) is a compare-and-set
/// that settles the credit in the same statement, so whoever ends the render first wins and
/// nothing is charged twice. The job ends in the same transaction (`JobContext.end`): it completes
/// with the render; a failed render's job ends `dead` with the failure's code and message
/// (`RenderFailure`), so the queue's counts, its dead list and the console show it. Only infrastructure errors (the database) retry it. It is deferred, its
/// attempt unspent, while jobs are still making the render's photos (`RenderInputCheck`) and while
/// a storage outage refuses its result (`StorageOutage`).
public struct RenderHandler: JobHandler {
    public let kind = JobKind.renderRun
    /// Each render carries its provider's and its requester's limit keys (`RenderCapacity`).
    public let usesLimits = true
    public let store: RenderStore
    public let storage: any ImageStorage
    public let providers: ProviderCatalog
    public let fetcher: ProviderImageFetcher
    public let events: RenderEvents
    public let options: RenderOptions
    /// A result the store refuses for an outage defers the job instead of spending its attempt;
    /// the render's deadline still ends it.
    public var outage = StorageOutage()
    public var unreadyReason: String? { outage.unreadyReason }
    /// Its callbacks' waiters, run in the worker's group.
    public var services: [any Service] { [events] }
    /// Run times for admission control's estimate, written in batches.
    var latencies = ProviderLatencySamples()
    /// Whether a tracer was bootstrapped (read once): with none, the render's steps make no span.
    var tracing = TracePropagation.isTracing

    /// Raised inside the render when its deadline passes.
    struct DeadlinePassed: Error {}

    public init(
        store: RenderStore, storage: any ImageStorage, providers: ProviderCatalog, fetcher: ProviderImageFetcher, events: RenderEvents,
        options: RenderOptions
    ) {
        self.store = store
        self.storage = storage
        self.providers = providers
        self.fetcher = fetcher
        self.events = events
        self.options = options
    }

    public func run(_ job: ClaimedJob, context: JobContext) async throws -> JSONValue? {
        let payload = try job.decodePayload(RenderRunPayload.self)
        let logger = context.logger.with("render_id", payload.renderID.value)
        // Reading the render, looking for the jobs still making its photos and starting it are
        // one transaction: a pending maker rolls the start back and defers the job. Past its
        // deadline (by this host's clock) it is not deferred: the photo is sent, as when no
        // cut-out is stored. A provider this worker cannot build fails the render at once
        // (`PROVIDER_MISCONFIGURED`) rather than after its photos were waited for.
        let render: RenderRecord
        let earlier: ProviderSubmission?
        let start = try await store.start(id: payload.renderID) { render, connection in
            guard (try? providers.provider(named: render.provider)) != nil, render.deadlineAt > Date() else { return }
            if let wait = try await RenderInputCheck.makersPending(for: render, on: connection) { throw wait }
        }
        switch start {
        case .started(let started, let submission):
            (render, earlier) = (started, submission)
        case .gone:
            // Deleted with its expired onboarding token before a worker got to it: nothing to do.
            logger.warning("render no longer exists")
            return summary(payload.renderID, "gone")
        case .ended(let ended):
            return try endedElsewhere(ended)
        case .pastDeadline(let expired, let earlier):
            // Taken over too late: the earlier attempt's provider job is dropped, as it would be
            // had its deadline passed while it ran.
            if let earlier, let provider = try? providers.provider(named: expired.provider) { await provider.cancel(earlier) }
            let failure = RenderFailure(.timeout, "the deadline passed before a worker took the render over")
            guard try await store.fail(id: expired.id, failure: failure, endingJob: ending(job, context, failure)) else {
                return try await endedElsewhere(expired.id)
            }
            throw failed(expired, failure, logger: logger)
        }
        let provider: any TryOnProvider
        do {
            provider = try providers.provider(named: render.provider)
        } catch {
            let failure = RenderFailure(.providerMisconfigured, "\(error)")
            guard try await store.fail(id: render.id, failure: failure, endingJob: ending(job, context, failure)) else {
                return try await endedElsewhere(render.id)
            }
            throw failed(render, failure, logger: logger)
        }
        var photos: RenderPhotos?
        let check = RenderInputCheck(queue: context.queue, storage: storage, outage: outage)
        switch try await check.verdict(for: render, cutoutMade: try await cutoutMade(payload, job, context), makersLookedFor: true) {
        case .ready(let read): photos = read
        case .notReady(let deferral) where render.deadlineAt > Date():
            // A photo not stored yet, nobody making it yet: the render waits as one not started.
            try await store.unstart(id: render.id)
            throw deferral
        case .notReady: break
        }
        let remaining = render.deadlineAt.timeIntervalSinceNow
        let spans = RenderSpans(renderID: render.id.value, provider: render.provider, enabled: tracing)
        let attempt = RenderAttempt(
            render: render, earlier: earlier, photos: photos, provider: provider,
            work: RenderWork(store: store, storage: storage, fetcher: fetcher, events: events, options: options, outage: outage),
            spans: spans, logger: logger)
        let outcome: RenderAttempt.Outcome
        let attemptStarted = ContinuousClock.now
        do {
            outcome = try await withDeadline(.seconds(max(0, remaining))) { try await attempt.run() }
        } catch is DeadlinePassed {
            await attempt.cancelAtProvider()
            let failure = attempt.deadlineFailure()
            guard try await settle(spans, failure.code.rawValue, {
                try await store.fail(id: render.id, failure: failure, endingJob: ending(job, context, failure))
            }) else {
                return try await endedElsewhere(render.id)
            }
            throw failed(render, failure, logger: logger)
        }
        switch outcome {
        case .stored(let path):
            let result = summary(render.id, RenderStatus.complete.rawValue)
            let ended = try await settle(spans, RenderStatus.complete.rawValue) {
                try await store.complete(id: render.id, resultPath: path, endingJob: ending(job, context, .completed(result)))
            }
            if !ended {
                // The deadline passed (or a sweep ended it) between the download and now: the
                // late result does not revive it.
                try? await storage.delete(.render(user: render.ownerID, render: render.id))
                return try await endedElsewhere(render.id)
            }
            logger.info("render complete", metadata: ["path": "\(path)"])
            // What admission control expects of the provider's next renders.
            try? await latencies.record(provider: render.provider, ContinuousClock.now - attemptStarted, to: store.capacity)
            record(render, outcome: RenderStatus.complete.rawValue, settled: "consume")
            return result
        case .failed(let failure):
            guard try await settle(spans, failure.code.rawValue, {
                try await store.fail(id: render.id, failure: failure, endingJob: ending(job, context, failure))
            }) else {
                return try await endedElsewhere(render.id)
            }
            throw failed(render, failure, logger: logger)
        }
    }

    /// The job of a render someone else ended (a sweep, an earlier attempt): completed with a
    /// complete render, dead with a failed one's failure, like the job that ended it.
    private func endedElsewhere(_ id: StorageID) async throws -> JSONValue {
        guard let render = try await store.render(id: id) else { return summary(id, "gone") }
        return try endedElsewhere(render)
    }

    private func endedElsewhere(_ render: RenderRecord) throws -> JSONValue {
        if let failure = render.failure { throw failed(failure) }
        return summary(render.id, "already \(render.status.rawValue)")
    }

    /// How the job of a failed render ends: `dead` at once (running it again would not revive the
    /// render), its error code the failure's.
    private func failed(_ failure: RenderFailure) -> JobError {
        .permanent(code: JobErrorCode(rawValue: failure.code.rawValue), message: failure.message)
    }

    /// Ends the render's job in the transaction that ends the render (`RenderStore.settle`), as
    /// `run` then answers: dead with the failure (`failed`).
    private func ending(_ job: ClaimedJob, _ context: JobContext, _ failure: RenderFailure) -> RenderStore.JobEnd {
        ending(job, context, .dead(code: JobErrorCode(rawValue: failure.code.rawValue), message: failure.message))
    }

    /// Ends the render's job in the transaction that ends the render (`RenderStore.settle`), as
    /// `run` then answers; refused (nothing written) when the job is no longer this worker's.
    private func ending(_ job: ClaimedJob, _ context: JobContext, _ end: JobEnding) -> RenderStore.JobEnd {
        { connection in _ = try await context.end(job, end, on: connection) }
    }

    /// What the garment's cut-out job, when the render ran after one, said: whether it made a
    /// cut-out (false: every backend failed, the normalised photo is sent instead); nil when the
    /// render ran after none. The job runs only once every job it runs after has completed, so
    /// the cut-out is never read while pending.
    private func cutoutMade(_ payload: RenderRunPayload, _ job: ClaimedJob, _ context: JobContext) async throws -> Bool? {
        guard let cutoutJob = payload.cutoutJobID else { return nil }
        let result = try await context.dependencies(of: job).first { $0.id == cutoutJob }?.result
        return CutoutResult.madeCutout(result) != false
    }

    /// Ends the render as `outcome` in a `settle` span; `end` says whether it ended here (false:
    /// someone else ended it first).
    private func settle(_ spans: RenderSpans, _ outcome: String, _ end: () async throws -> Bool) async throws -> Bool {
        try await spans.run("settle") { span in
            let ended = try await end()
            span.attributes[TraceAttribute.outcome] = ended ? outcome : "ended elsewhere"
            return ended
        }
    }

    private func record(_ render: RenderRecord, outcome: String, settled entry: String) {
        RenderMetrics.finished(provider: render.provider, outcome: outcome, seconds: -render.createdAt.timeIntervalSinceNow)
        if render.charged { RenderMetrics.creditSettled(entry) }
    }

    /// A render this attempt failed: counted, logged (`render failed`, with its `failure_code`:
    /// the fleet's settings at fault are an error, the rest a warning), its job's end.
    private func failed(_ render: RenderRecord, _ failure: RenderFailure, logger: Logger) -> JobError {
        record(render, outcome: failure.code.errorCode.rawValue, settled: "release")
        RenderMetrics.failed(provider: render.provider, code: failure.code)
        logger.log(level: failure.code == .providerMisconfigured ? .error : .warning, "render failed", metadata: [
            "provider": "\(render.provider)", "failure_code": "\(failure.code.rawValue)", "reason": "\(failure.message)",
        ])
        return failed(failure)
    }

    private func summary(_ id: StorageID, _ outcome: String) -> JSONValue {
        .object(["renderId": .string(id.value), "outcome": .string(outcome)])
    }

    /// Runs `body`, throwing `DeadlinePassed` once `limit` has elapsed.
    private func withDeadline<T: Sendable>(_ limit: Duration, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T.self) { group in
            group.addTask { try await body() }
            group.addTask {
                try await Task.sleep(for: limit)
                throw DeadlinePassed()
            }
            defer { group.cancelAll() }
            return try await group.next()!
        }
    }
}

/// How the render worker waits for providers.
public struct RenderOptions: Sendable {
    /// Where providers that take webhooks post their callbacks (the dispatcher's webhook
    /// endpoint); nil: poll only.
    public var webhookURL: String?
    /// How long after submitting to rely on the callback alone before polling too.
    public var webhookGrace: Duration
    /// The interval between polls (and between looks at the stored callbacks).
    public var pollInterval: Duration

    public init(webhookURL: String? = nil, webhookGrace: Duration = .seconds(8), pollInterval: Duration = .seconds(2)) {
        self.webhookURL = webhookURL
        self.webhookGrace = webhookGrace
        self.pollInterval = pollInterval
    }

    /// No callback comes without a webhook URL: then polling starts at once.
    var callbackGrace: Duration { webhookURL == nil ? .zero : webhookGrace }
}

