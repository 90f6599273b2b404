import FleetAccess
import DispatcherProtocol
import FleetQueue
import FleetSupport
import Foundation
import Logging
import Renders

// The operators' ops (`docs/protocol.md`, "Job control"): look at jobs, put dead ones back,
// delete finished ones, pause kinds and queues. Whatever changes something is in the audit trail
// under the caller's token name.

extension OperationRegistry {
    /// `reads`: where `jobs.list` and `audit.list` read (a replica's queue, or `queue`).
    /// `admissionChanged`: told after a limit is set or removed, or a kind or queue paused or
    /// resumed, here (render admission reads again before its next decision).
    public static func jobControlOperations(
        queue: JobQueue, reads: JobQueue? = nil, admissionChanged: @escaping @Sendable () -> Void = {}, logger: Logger
    ) -> [any DispatcherOperation] {
        let control = queue.control(logger: logger, retryGuard: RenderJobRetryGuard())
        let readControl = reads.map { $0.control(logger: logger) } ?? control
        return [
            JobGetOperation(queue: queue),
            JobsListOperation(control: readControl),
            JobRetryOperation(queue: queue, control: control),
            JobsRetryOperation(control: control),
            JobDiscardOperation(control: control),
            JobsDiscardOperation(control: control),
            QueuePauseOperation(control: control, knownKinds: queue.knownKinds, changed: admissionChanged),
            QueueResumeOperation(control: control, changed: admissionChanged),
            AuditListOperation(control: readControl),
            LimitsListOperation(control: control),
            LimitSetOperation(control: control, changed: admissionChanged),
            LimitRemoveOperation(control: control, changed: admissionChanged),
        ]
    }
}

/// The token name an action is recorded under.
var actor: String { Caller.current?.name ?? "unknown" }

/// A keyset cursor: the last id of the page, opaque to clients.
enum PageCursor {
    static func make(lastID: Int64?, pageFull: Bool) -> String? {
        guard pageFull, let lastID else { return nil }
        return String(lastID)
    }

    static func decode(_ cursor: String?) throws -> Int64? {
        guard let cursor else { return nil }
        guard let id = Int64(cursor), id > 0 else { throw DispatcherError(.badArgument, "args.cursor is not a cursor this server gave") }
        return id
    }

    static func limit(_ limit: Int?, default defaultLimit: Int, max maxLimit: Int) throws -> Int {
        let limit = limit ?? defaultLimit
        guard (1...maxLimit).contains(limit) else { throw DispatcherError(.badArgument, "args.limit must be between 1 and \(maxLimit)") }
        return limit
    }
}

/// `job.get`
public struct JobGetOperation: DispatcherOperation {
    public var access: OperationAccess { .readers }
    let queue: JobQueue

    public func run(_ request: JobGetRequest) async throws -> JobStatus {
        try await queue.status(of: request.jobId)
    }
}

/// `jobs.list`
public struct JobsListOperation: DispatcherOperation {
    public var access: OperationAccess { .readers }
    let control: JobControl

    public func run(_ request: JobsListRequest) async throws -> JobsListRequest.Result {
        let limit = try PageCursor.limit(request.limit, default: JobsListRequest.defaultLimit, max: JobsListRequest.maxLimit)
        let jobs = try await control.list(JobFilter(request.filter), before: try PageCursor.decode(request.cursor), limit: limit)
        return .init(jobs: jobs.map(JobSummaryView.init), nextCursor: PageCursor.make(lastID: jobs.last?.id, pageFull: jobs.count == limit))
    }
}

/// `job.retry`
public struct JobRetryOperation: DispatcherOperation {
    public var access: OperationAccess { .operators }
    let queue: JobQueue
    let control: JobControl

    public func run(_ request: JobRetryRequest) async throws -> JobStatus {
        switch try await control.retry(id: request.jobId, runAt: request.runAt, actor: actor) {
        case .retried: return try await queue.status(of: request.jobId)
        case .notRetryable(let state):
            throw DispatcherError(.jobNotRetryable, "job \(request.jobId) is \(state.rawValue); only dead and cancelled jobs are retried")
        case .refused(let refusal):
            throw DispatcherError(.jobNotRetryable, "job \(request.jobId) is left as it is: \(refusal.reason)" + (refusal.instead.map { "; instead: \($0)" } ?? ""))
        case .notFound: throw DispatcherError(.notFound, "no job \(request.jobId)")
        }
    }
}

/// `job.discard`
public struct JobDiscardOperation: DispatcherOperation {
    public var access: OperationAccess { .operators }
    let control: JobControl

    public func run(_ request: JobDiscardRequest) async throws -> JobDiscardRequest.Result {
        switch try await control.discard(id: request.jobId, actor: actor) {
        case .discarded: return .init(jobId: request.jobId)
        case .notFinished(let state):
            throw DispatcherError(.jobNotFinished, "job \(request.jobId) is \(state.rawValue); only finished jobs are discarded (cancel it first)")
        case .notFound: throw DispatcherError(.notFound, "no job \(request.jobId)")
        }
    }
}

/// `jobs.retry` and `jobs.discard`: the filter's jobs, at most `limit`, acted on by `act` (or
/// counted, on a dry run) under the caller's name.
public struct BulkJobsOperation<Request: BulkJobsRequest>: DispatcherOperation {
    public var access: OperationAccess { .operators }
    let act: @Sendable (_ filter: JobFilter, _ limit: Int, _ dryRun: Bool, _ actor: String) async throws -> BulkJobsResult

    public func run(_ request: Request) async throws -> BulkJobsResult {
        let limit = try PageCursor.limit(request.limit, default: request.limit, max: Request.maxLimit)
        return try await act(JobFilter(request.filter), limit, request.dryRun ?? false, actor)
    }
}

extension BulkJobsOperation where Request == JobsRetryRequest {
    init(control: JobControl) {
        act = { filter, limit, dryRun, actor in
            let outcome = try await control.retryMany(filter, limit: limit, dryRun: dryRun, actor: actor)
            let leftAlone = outcome.leftAlone.map { BulkJobsResult.LeftAlone(reason: $0.reason, count: $0.count, sampleJobIds: $0.sampleJobIDs) }
            return BulkJobsResult(count: outcome.retried, dryRun: dryRun, leftAlone: leftAlone.isEmpty ? nil : leftAlone)
        }
    }
}

extension BulkJobsOperation where Request == JobsDiscardRequest {
    init(control: JobControl) {
        act = { BulkJobsResult(count: try await control.discardMany($0, limit: $1, dryRun: $2, actor: $3), dryRun: $2) }
    }
}

public typealias JobsRetryOperation = BulkJobsOperation<JobsRetryRequest>
public typealias JobsDiscardOperation = BulkJobsOperation<JobsDiscardRequest>

/// The one target of `queue.pause` / `queue.resume`.
private func pauseTarget(kind: String?, queue: String?) throws -> PauseTarget {
    switch (kind, queue) {
    case (let kind?, nil) where !kind.isEmpty: return .kind(JobKind(rawValue: kind))
    case (nil, let queue?) where !queue.isEmpty: return .queue(queue)
    default: throw DispatcherError(.badArgument, "give exactly one of args.kind and args.queue")
    }
}

/// `queue.pause`
public struct QueuePauseOperation: DispatcherOperation {
    public var access: OperationAccess { .operators }
    let control: JobControl
    let knownKinds: KnownKinds?
    let changed: @Sendable () -> Void

    public func run(_ request: QueuePauseRequest) async throws -> QueuePausesResult {
        let target = try pauseTarget(kind: request.kind, queue: request.queue)
        if target.scope == .kind, let knownKinds, !knownKinds.contains(JobKind(rawValue: target.name)) {
            throw DispatcherError(.unknownKind, "unknown job kind '\(target.name.prefix(100))'; known kinds: \(knownKinds.list)")
        }
        let paused = try await control.pause(target, actor: actor)
        if paused { changed() }
        return QueuePausesResult(changed: paused, pauses: try await control.pauses().map(QueueStats.Pause.init))
    }
}

/// `queue.resume`
public struct QueueResumeOperation: DispatcherOperation {
    public var access: OperationAccess { .operators }
    let control: JobControl
    let changed: @Sendable () -> Void

    public func run(_ request: QueueResumeRequest) async throws -> QueuePausesResult {
        let resumed = try await control.resume(try pauseTarget(kind: request.kind, queue: request.queue), actor: actor)
        if resumed { changed() }
        return QueuePausesResult(changed: resumed, pauses: try await control.pauses().map(QueueStats.Pause.init))
    }
}

/// `audit.list`
public struct AuditListOperation: DispatcherOperation {
    public var access: OperationAccess { .readers }
    let control: JobControl

    public func run(_ request: AuditListRequest) async throws -> AuditListRequest.Result {
        let limit = try PageCursor.limit(request.limit, default: JobsListRequest.defaultLimit, max: JobsListRequest.maxLimit)
        let entries = try await control.auditTrail(before: try PageCursor.decode(request.cursor), limit: limit)
        return .init(
            entries: entries.map {
                AuditListRequest.Entry(id: $0.id, at: $0.at, actor: $0.actor, action: $0.action,
                                       target: (try? JSONValue(json: $0.target)) ?? .null, affected: $0.affected)
            },
            nextCursor: PageCursor.make(lastID: entries.last?.id, pageFull: entries.count == limit))
    }
}
