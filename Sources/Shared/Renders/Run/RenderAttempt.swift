import FleetHTTPClient
import FleetQueue
import FleetStorage
import FleetSupport
import Foundation
import Imaging
import Logging
import Providers
import Synchronization
import Tracing

/// What every attempt a render worker runs works with: its handler's parts, handed to each
/// attempt as a value.
struct RenderWork: Sendable {
    let store: RenderStore
    let storage: any ImageStorage
    let fetcher: ProviderImageFetcher
    let events: RenderEvents
    let options: RenderOptions
    let outage: StorageOutage
}

/// One run of one render; `run()` throws only infrastructure errors.
struct RenderAttempt: Sendable {
    enum Outcome: Sendable {
        case stored(path: String)
        case failed(RenderFailure)
    }

    /// Which garment image the render sends (`RenderInputCheck` decides).
    enum GarmentSource: Sendable, Equatable {
        /// Its cut-out: stored, and nothing is making another.
        case cutout
        /// Its normalised photo: no cut-out is stored, or the cut-out job the render ran after
        /// ended without one.
        case photo
    }

    let render: RenderRecord
    /// The provider job an earlier attempt submitted, to resume instead of paying again.
    let earlier: ProviderSubmission?
    let garmentSource: GarmentSource
    let provider: any TryOnProvider
    let work: RenderWork
    let spans: RenderSpans
    let logger: Logger
    private let progress = AttemptProgress()

    /// `photos`: what the input check read (nil when it found the render past its deadline).
    init(
        render: RenderRecord, earlier: ProviderSubmission?, photos: RenderPhotos?, provider: any TryOnProvider, work: RenderWork,
        spans: RenderSpans, logger: Logger
    ) {
        self.render = render
        self.earlier = earlier
        self.garmentSource = photos?.source ?? .photo
        progress.keepCheckedPhotos(photos)
        self.provider = provider
        self.work = work
        self.spans = spans
        self.logger = logger
        // Cancelled at the provider like a fresh one should this attempt's deadline pass, even
        // before `run` starts (a deadline already past when the job was taken over).
        progress.submission = earlier
    }

    func run() async throws -> Outcome {
        var retried = false
        var submission: ProviderSubmission
        // A fresh submission's callback cannot be stored yet (or its announcement is held for
        // the wait below), so the first look at the table waits for a wake-up; a resumed one's
        // may have come while no worker waited.
        var lookNow: Bool
        if let earlier {
            submission = earlier
            lookNow = true
            logger.info("resuming the provider job of an earlier attempt", metadata: ["provider_job_id": "\(earlier.jobID)"])
        } else {
            switch try await submitWithRetry(retried: &retried) {
            case .success(let made): submission = made
            case .failure(let error): return .failed(error.renderFailure)
            }
            lookNow = false
        }
        var submittedAt = ContinuousClock.now
        while true {
            let waited = try await spans.run("provider wait", kind: .client) { span in
                let waited = try await waitForResult(of: submission, since: submittedAt, lookNow: lookNow)
                span.attributes[TraceAttribute.outcome] = waited.label
                return waited
            }
            lookNow = false
            switch waited {
            case .unreadable(let reason):
                return .failed(RenderFailure(.providerDown, "\(provider.name): \(reason)"))
            case .succeeded(let image):
                return try await store(image)
            case .failed(let failure) where failure.retryable && !retried:
                logger.warning("provider job failed; submitting once more", metadata: ["error": "\(failure)"])
                retried = true
                switch try await submitWithRetry(retried: &retried) {
                case .success(let made): submission = made
                case .failure(let error): return .failed(error.renderFailure)
                }
                submittedAt = ContinuousClock.now
            case .failed(let failure):
                return .failed(failure.renderFailure(provider: provider.name))
            }
        }
    }

    /// How waiting for the provider's outcome ended: its result once no longer pending, or two
    /// answers in a row that were not its documented JSON.
    private enum Waited {
        case succeeded(ProviderImage)
        case failed(ProviderFailure)
        case unreadable(String)

        var label: String {
            switch self {
            case .succeeded: "succeeded"
            case .failed: "failed"
            case .unreadable: "unreadable"
            }
        }
    }

    /// Waits for the submission's callback or polls until its outcome is known. An answer that
    /// was not the provider's documented JSON is read once more, as after a 5xx; a second one
    /// ends the render instead of polling garbage until the deadline.
    private func waitForResult(of submission: ProviderSubmission, since submittedAt: ContinuousClock.Instant, lookNow: Bool) async throws -> Waited {
        // A callback whose announcement carries it is taken from there, not read from the table
        // (expected since the submit; a resumed submission's from now on).
        work.events.expect(submission.jobID)
        defer { work.events.forget(submission.jobID) }
        var lookNow = lookNow
        var unreadableBefore = false
        while true {
            try Task.checkCancellation()  // the deadline passed
            if !lookNow { await waitForCallback(submission, since: submittedAt) }
            lookNow = false
            switch await outcome(of: submission, since: submittedAt) {
            case .read(.pending):
                unreadableBefore = false
            case .read(.succeeded(let image)):
                return .succeeded(image)
            case .read(.failed(let failure)):
                return .failed(failure)
            case .unreadable(let error) where unreadableBefore:
                return .unreadable("the provider's answers are not its documented JSON: \(error)")
            case .unreadable(let error):
                logger.warning("the provider's answer is not its documented JSON; reading once more", metadata: ["error": "\(error)"])
                unreadableBefore = true
                lookNow = true
            }
        }
    }

    /// Why the deadline passed: the provider's 429s kept the render from being submitted, or
    /// the render took too long.
    func deadlineFailure() -> RenderFailure {
        progress.rateLimitedLast
            ? RenderFailure(.providerRateLimited, "\(provider.name): rate limited (HTTP 429) until the render's deadline")
            : RenderFailure(.timeout, "\(provider.name): no result within the render's deadline")
    }

    /// Asks the provider to drop the job, if one was submitted (deadline passed).
    func cancelAtProvider() async {
        if let submission = progress.submission { await provider.cancel(submission) }
    }

    /// Submits; a transient error is retried once (if the render's single retry is unused).
    private func submitWithRetry(retried: inout Bool) async throws -> Result<ProviderSubmission, ProviderError> {
        let (request, sendsCutout) = try await tryOnRequest()
        while true {
            let started = ContinuousClock.now
            do {
                let submission = try await spans.run("provider submit", kind: .client) { span in
                    do {
                        let submission = try await provider.submit(request)
                        span.attributes[TraceAttribute.outcome] = "ok"
                        return submission
                    } catch {
                        span.attributes[TraceAttribute.outcome] = (error as? ProviderError).map { $0.isTransient ? "transient" : "rejected" } ?? "error"
                        throw error
                    }
                }
                RenderMetrics.providerCall(provider: provider.name, call: "submit", outcome: "ok", seconds: (ContinuousClock.now - started).seconds)
                progress.rateLimitedLast = false
                progress.submission = submission
                // From the submit on, its callback's announcement is kept (`waitForResult` forgets it).
                work.events.expect(submission.jobID)
                // A job still running at the provider is kept on the row: a worker taking over
                // after a crash asks for it instead of paying for a second one.
                do {
                    try await work.store.recordSubmission(
                        id: render.id, cutout: sendsCutout, submission: submission.state.isSettled ? nil : submission)
                } catch {
                    work.events.forget(submission.jobID)
                    throw error
                }
                return .success(submission)
            } catch let error as ProviderError where error.rateLimitedFor != nil {
                // The provider's capacity, not a fault: not the render's one retry. The fleet eases
                // off; this render waits and asks again, until its deadline ends the wait. Until an
                // answer other than a 429, the deadline passing is the rate limit's doing, whether
                // it finds the render waiting or asking again.
                progress.rateLimitedLast = true
                RenderMetrics.providerCall(provider: provider.name, call: "submit", outcome: "rate_limited", seconds: (ContinuousClock.now - started).seconds)
                let rate = try? await work.store.capacity.throttle(provider: provider.name)
                let pause = (error.rateLimitedFor ?? nil) ?? .seconds(1)
                logger.warning("provider rate limited; waiting to submit again", metadata: [
                    "retry_after_ms": "\(Int(pause.seconds * 1000))", "fleet_rate_per_window": "\(rate.flatMap { $0 }.map(String.init) ?? "none")",
                ])
                try await Task.sleep(for: pause)
            } catch let error as ProviderError where error.isTransient && !retried {
                // The deadline's cancellation of a request in flight reads as a transient error:
                // not the provider's answer.
                if !Task.isCancelled { progress.rateLimitedLast = false }
                RenderMetrics.providerCall(provider: provider.name, call: "submit", outcome: "transient", seconds: (ContinuousClock.now - started).seconds)
                logger.warning("provider submit failed; retrying once", metadata: ["error": "\(error)"])
                retried = true
            } catch let error as ProviderError {
                RenderMetrics.providerCall(provider: provider.name, call: "submit", outcome: error.isTransient ? "transient" : "rejected",
                                           seconds: (ContinuousClock.now - started).seconds)
                return .failure(error)
            }
        }
    }

    /// Until the callback is announced: within the grace period that is the only wake-up (the
    /// table is not read in vain while the provider works); after it, each poll interval too.
    private func waitForCallback(_ submission: ProviderSubmission, since submittedAt: ContinuousClock.Instant) async {
        if submission.state.isSettled { return }
        let graceLeft = work.options.callbackGrace - (ContinuousClock.now - submittedAt)
        let timeout = graceLeft > .zero ? graceLeft : work.options.pollInterval
        await work.events.wait(for: submission.jobID, timeout: timeout)
    }

    /// What a look at the outcome found.
    private enum Look {
        case read(ProviderResult)
        /// The callback or the poll's answer was not the provider's documented JSON.
        case unreadable(ProviderError)
    }

    /// The callback if one was stored, else (after the grace period) a poll.
    private func outcome(of submission: ProviderSubmission, since submittedAt: ContinuousClock.Instant) async -> Look {
        if case .settled(let result) = submission.state { return .read(result) }
        do {
            if let source = provider.webhookSource, let payload = try await callback(of: submission, from: source) {
                return .read(try provider.result(ofCallback: payload))
            }
            guard ContinuousClock.now - submittedAt >= work.options.callbackGrace else { return .read(.pending) }
            let started = ContinuousClock.now
            let result = try await provider.result(of: submission)
            RenderMetrics.providerCall(provider: provider.name, call: "poll", outcome: "ok", seconds: (ContinuousClock.now - started).seconds)
            return .read(result)
        } catch let error as ProviderError where error.isMalformed {
            RenderMetrics.providerCall(provider: provider.name, call: "poll", outcome: "malformed", seconds: 0)
            return .unreadable(error)
        } catch {
            // A failed poll (5xx, no connection, the database) is not a failed render: look
            // again until the deadline.
            logger.warning("could not read the provider's outcome yet", metadata: ["error": "\(error)"])
            return .read(.pending)
        }
    }

    /// The callback stored for `submission`: as its announcement carried it, else from the table.
    private func callback(of submission: ProviderSubmission, from source: String) async throws -> Data? {
        if let carried = work.events.callback(submission.jobID) { return carried }
        return try await work.store.providerEvent(provider: source, requestID: submission.jobID)
    }

    /// Downloads the image, checks it decodes, stores it as JPEG under `renders/`.
    private func store(_ image: ProviderImage) async throws -> Outcome {
        let bytes: Data
        do {
            bytes = try await spans.run("download") { _ in try await work.fetcher.fetch(image, provider: provider.name).bytes }
        } catch {
            return .failed(RenderFailure(.providerDown, "result download failed: \(error)"))
        }
        return try await spans.run("store") { span in
            let jpeg: Data
            do {
                jpeg = try await offload { try RenderImage.normalize(bytes) }
            } catch {
                span.attributes[TraceAttribute.outcome] = "undecodable"
                return .failed(RenderFailure(.providerDown, "\(provider.name): the provider's image does not decode: \(error)"))
            }
            let key = StorageKey.render(user: render.ownerID, render: render.id)
            do {
                // A render's result is never replaced once stored: its bytes stay those a client may
                // have fetched (a retry after a crash between the write and the row keeps the first).
                try await work.outage.deferringOutages(.write) { try await work.storage.create(jpeg, at: key) }
            } catch StorageError.alreadyExists {
                span.attributes[TraceAttribute.outcome] = "stored before"
                return .stored(path: key.relativePath)
            }
            span.attributes[TraceAttribute.outcome] = "stored"
            return .stored(path: key.relativePath)
        }
    }

    /// What the provider is sent, and whether its garment is the cut-out.
    private func tryOnRequest() async throws -> (TryOnRequest, cutout: Bool) {
        let photos: RenderPhotos
        if let checked = progress.takeCheckedPhotos() { photos = checked } else { photos = try await readPhotos() }
        let remaining = max(1, render.deadlineAt.timeIntervalSinceNow)
        let request = TryOnRequest(
            person: photos.person, garment: photos.garment, category: render.category,
            options: TryOnOptions(webhookURL: work.options.webhookURL, timeout: .seconds(remaining)))
        return (request, garmentSource == .cutout)
    }

    /// The photos read again, for a second submission.
    private func readPhotos() async throws -> RenderPhotos {
        try await RenderPhotos.read(for: render, source: garmentSource, from: work.storage, outage: work.outage)
    }
}

/// Where the attempt stands: the photos its first submission sends, and, read when its deadline
/// passes, the submission made so far (to cancel it) and whether the provider's last answer to a
/// submit was a 429 (then the deadline passing is the provider's rate limit,
/// `PROVIDER_RATE_LIMITED`, not a slow render).
final class AttemptProgress: Sendable {
    private let submitted = Mutex<ProviderSubmission?>(nil)
    private let rateLimited = Mutex(false)
    private let photos = Mutex<RenderPhotos?>(nil)

    /// The photos the input check read, sent by the first submission; a second one (after the
    /// provider's 5xx) reads them again rather than holding them while the provider works.
    func keepCheckedPhotos(_ checked: RenderPhotos?) { photos.withLock { $0 = checked } }

    func takeCheckedPhotos() -> RenderPhotos? { photos.withLock { $0.take() } }

    var submission: ProviderSubmission? {
        get { submitted.withLock { $0 } }
        set { submitted.withLock { $0 = newValue } }
    }

    var rateLimitedLast: Bool {
        get { rateLimited.withLock { $0 } }
        set { rateLimited.withLock { $0 = newValue } }
    }
}

extension Logger {
    func with(_ key: String, _ value: String) -> Logger {
        var copy = self
        copy[metadataKey: key] = "\(value)"
        return copy
    }
}
