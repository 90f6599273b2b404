import FleetPostgres
import FleetQueue
import FleetStorage
import Foundation
import RenderLedger

/// Why an operator's retry of a render was refused; nothing changed.
public enum RenderRetryError: Error, Equatable, CustomStringConvertible {
    case notFound(String)
    /// Only a failed render is retried.
    case notFailed(String, RenderStatus)
    /// Its `render.run` job has not ended yet (a worker still finishing an attempt the timeout
    /// sweep ended): retried now, two attempts would run the render at once.
    case jobNotEnded(String, job: Int64, JobState)

    public var message: String {
        switch self {
        case .notFound(let id): "no render \(id)"
        case .notFailed(let id, let status): "render \(id) is \(status.rawValue); only failed renders are retried"
        case .jobNotEnded(let id, let job, let state): "render \(id)'s job \(job) is still \(state.rawValue); retry the render once it has ended"
        }
    }

    public var description: String { message }
}

/// Operators' retries of failed renders (`render.retry`): each render as a whole, in one
/// transaction. A retry by filter finds only technical failures (`RenderFailureCode.isTechnical`,
/// the list onboarding tokens read too): a photo the provider refused would be refused again, so
/// only an operator naming the render (once its cause is fixed, e.g. the upload replaced) retries
/// one. The render goes back to `pending` with a new deadline (now + the render deadline)
/// and its retry count one higher; a charged render reserves its credit again
/// (`CreditLedger.reserve`, keyed by the retry: a user without credit left is refused
/// `INSUFFICIENT_CREDITS` and the render stays failed); a render of an onboarding token or a
/// subscriber is not charged now either. Its `render.run` job, `dead` or `cancelled`, is put back
/// with fresh attempts together with the failed jobs making its photos (so it never waits for an
/// input that will not be made); `completed` (the render failed at its provider) or deleted, a new
/// job runs it. Its end, whichever, fires its completion callback again (migration 24).
public struct RenderRetries: Sendable {
    let pool: PostgresPool
    /// From the retry to `RENDER_TIMEOUT`, as from a request.
    public let deadline: Duration

    public init(pool: PostgresPool, deadline: Duration = .seconds(30)) {
        self.pool = pool
        self.deadline = deadline
    }

    /// Which failed renders an operator means; every field left nil matches all.
    public struct Filter: Sendable, Equatable, Encodable {
        /// The render's business code (`RENDER_FAILED`, `RENDER_TIMEOUT`).
        public var errorCode: String?
        /// Why it failed (`RenderFailureCode`'s raw value).
        public var failureCode: String?
        public var provider: String?
        /// Failed at or after.
        public var failedSince: Date?
        public var limit: Int

        public init(errorCode: String? = nil, failureCode: String? = nil, provider: String? = nil, failedSince: Date? = nil, limit: Int) {
            self.errorCode = errorCode
            self.failureCode = failureCode
            self.provider = provider
            self.failedSince = failedSince
            self.limit = limit
        }
    }

    /// The ids of the failed renders matching `filter` that failed for a technical reason (a render
    /// failed before the fleet recorded reasons counts as one), the oldest failure first, at most
    /// `filter.limit`.
    public func failed(_ filter: Filter) async throws -> [String] {
        try await pool.query("""
            SELECT id FROM renders
            WHERE status = 'failed' AND ($1::text IS NULL OR error_code = $1) AND ($2::text IS NULL OR provider = $2)
                AND ($3::float8 IS NULL OR updated_at >= to_timestamp($3::float8))
                AND ($5::text IS NULL OR failure_code = $5) AND (failure_code IS NULL OR failure_code <> ALL($6::text[]))
            ORDER BY updated_at, id LIMIT $4
            """, [filter.errorCode, filter.provider, filter.failedSince?.timeIntervalSince1970, filter.limit, filter.failureCode,
                   PostgresArray(RenderFailureCode.allCases.filter { !$0.isTechnical }.map(\.rawValue))], planning: .eachCall
        ).rows.map { try $0.string("id") }
    }

    /// Retries the failed render `id` (see the type); answers it as it now is, `pending`. Throws
    /// `RenderRetryError` or `RenderRequestError` (`insufficientCredits`, `subscriptionExpired`),
    /// having changed nothing.
    public func retry(id: String) async throws -> RenderRecord {
        let render = try await pool.transactionRetryingConflicts { (connection: PostgresConnection) async throws -> RenderRecord in
            guard let row = try await connection.query(
                "SELECT \(RenderStore.columns) FROM renders WHERE id = $1 FOR UPDATE", [id]).rows.first else { throw RenderRetryError.notFound(id) }
            let failed = try RenderStore.record(row)
            guard failed.status == .failed else { throw RenderRetryError.notFailed(id, failed.status) }
            let retries = failed.retries + 1
            var jobState: JobState?
            if let job = failed.jobID {
                jobState = try await JobQueue(executor: connection, knownKinds: nil).states(of: [job])[job]
            }
            if let job = failed.jobID, let jobState, !jobState.isTerminal { throw RenderRetryError.jobNotEnded(id, job: job, jobState) }
            if failed.charged, let user = failed.userID {
                try await RenderRequests.reserveCredit(user: user, render: id, retries: retries, on: connection)
            }
            let reopened = try RenderStore.record(try await connection.query("""
                UPDATE renders SET status = 'pending', error_code = NULL, failure_code = NULL, error_message = NULL, result_path = NULL, provider_job_id = NULL,
                    provider_submission = NULL, garment_cutout = NULL, started_at = NULL, retries = $2, deadline_at = now() + make_interval(secs => $3),
                    updated_at = now()
                WHERE id = $1 RETURNING \(RenderStore.columns)
                """, [id, retries, deadline.seconds]).rows[0])
            if let job = failed.jobID, jobState == .dead || jobState == .cancelled {
                _ = try await JobQueue.retryWithFailedDependencies(id: job, attempts: RenderRequests.runAttempts, in: connection)
                return reopened
            }
            // The workers are woken at the commit by the statements that put the jobs back.
            return try await runAgain(reopened, retries: retries, on: connection)
        }
        RenderMetrics.retried(provider: render.provider)
        return render
    }

    /// A new `render.run` job for `render`, whose job completed (its provider failed it) or is
    /// deleted: it uses the garment's cut-out if one is stored, its photo otherwise.
    private func runAgain(_ render: RenderRecord, retries: Int, on connection: PostgresConnection) async throws -> RenderRecord {
        let run = try NewJob(
            RenderRunPayload(renderID: render.id), priority: 1, maxAttempts: RenderRequests.runAttempts,
            idempotencyKey: "render:\(render.id):retry:\(retries)",
            limitKeys: RenderCapacity.limitKeys(provider: render.provider, requester: render.userID ?? render.ephemeralTokenID ?? ""))
        let job = try await JobQueue.enqueue([run], in: connection)[0]
        return try RenderStore.record(try await connection.query(
            "UPDATE renders SET job_id = $2 WHERE id = $1 RETURNING \(RenderStore.columns)", [render.id.value, job.id]).rows[0])
    }
}
