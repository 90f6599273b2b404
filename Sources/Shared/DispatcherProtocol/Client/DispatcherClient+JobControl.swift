import Foundation

/// Job control (`docs/protocol.md`): a token with the `read` role looks, `operate` acts; others
/// get `FORBIDDEN`.
extension DispatcherClient {
    public func job(id: Int64) async throws -> JobStatus { try await send(JobGetRequest(jobId: id)) }

    /// One page, newest first; pass `nextCursor` back for the next one.
    public func listJobs(_ filter: JobFilterArguments? = nil, limit: Int? = nil, cursor: String? = nil) async throws -> JobsListRequest.Result {
        try await send(JobsListRequest(filter: filter, limit: limit, cursor: cursor))
    }

    public func retryJob(id: Int64, runAt: Date? = nil) async throws -> JobStatus { try await send(JobRetryRequest(jobId: id, runAt: runAt)) }

    public func retryJobs(_ filter: JobFilterArguments, limit: Int, dryRun: Bool = false) async throws -> BulkJobsResult {
        try await send(JobsRetryRequest(filter: filter, limit: limit, dryRun: dryRun))
    }

    public func discardJob(id: Int64) async throws -> JobDiscardRequest.Result { try await send(JobDiscardRequest(jobId: id)) }

    public func discardJobs(_ filter: JobFilterArguments, limit: Int, dryRun: Bool = false) async throws -> BulkJobsResult {
        try await send(JobsDiscardRequest(filter: filter, limit: limit, dryRun: dryRun))
    }

    public func pause(kind: String? = nil, queue: String? = nil) async throws -> QueuePausesResult {
        try await send(QueuePauseRequest(kind: kind, queue: queue))
    }

    public func resume(kind: String? = nil, queue: String? = nil) async throws -> QueuePausesResult {
        try await send(QueueResumeRequest(kind: kind, queue: queue))
    }

    public func auditTrail(limit: Int? = nil, cursor: String? = nil) async throws -> AuditListRequest.Result {
        try await send(AuditListRequest(limit: limit, cursor: cursor))
    }

    public func limits() async throws -> LimitsResult { try await send(LimitsListRequest()) }

    public func setLimit(key: String, maxRunning: Int? = nil, rate: Int? = nil, rateWindowSeconds: Double? = nil) async throws -> LimitsResult {
        try await send(LimitSetRequest(key: key, maxRunning: maxRunning, rate: rate, rateWindowSeconds: rateWindowSeconds))
    }

    public func removeLimit(key: String) async throws -> LimitsResult { try await send(LimitRemoveRequest(key: key)) }

    /// `render.retry` of one failed render; a refusal throws (`INSUFFICIENT_CREDITS`, `RENDER_NOT_RETRYABLE`, `NOT_FOUND`).
    public func retryRender(id: String, dryRun: Bool = false) async throws -> RetryRendersRequest.Result {
        try await send(RetryRendersRequest(renderId: id, dryRun: dryRun))
    }

    /// `render.retry` of the failed renders matching the filter; each refusal is in `refused`.
    public func retryRenders(
        errorCode: String? = nil, provider: String? = nil, since: Date? = nil, limit: Int? = nil, dryRun: Bool = false
    ) async throws -> RetryRendersRequest.Result {
        try await send(RetryRendersRequest(errorCode: errorCode, provider: provider, since: since, limit: limit, dryRun: dryRun))
    }
}
