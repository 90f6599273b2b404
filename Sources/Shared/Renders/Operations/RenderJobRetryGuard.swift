import FleetPostgres
import FleetQueue
import Foundation

/// What an operator's `retry` / `jobs retry` may do with `render.run` jobs: put back only the job
/// a render still open is waiting on. A render that has ended is retried as a whole
/// (`RenderRetries`: its credit reserved again, its deadline new, its inputs made again); its job
/// revived alone would find the render ended and do nothing, or, beside the job a render retry
/// gave it, run the render twice at the provider.
public struct RenderJobRetryGuard: JobRetryGuard {
    public let kinds: Set<JobKind> = [.renderRun]

    public init() {}

    public func refusals(of candidates: [RetryCandidate], on connection: PostgresConnection) async throws -> [Int64: RetryRefusal] {
        var renderOf: [Int64: String] = [:]
        for candidate in candidates {
            // A payload naming no render is not this guard's to judge: retried as any job.
            guard let payload = try? JSONDecoder().decode(RenderRunPayload.self, from: Data(candidate.payload.utf8)) else { continue }
            renderOf[candidate.id] = payload.renderID.value
        }
        var renders: [String: (status: RenderStatus, jobID: Int64?)] = [:]
        for row in try await connection.query(
            "SELECT id, status::text AS status, job_id FROM renders WHERE id = ANY ($1::text[])", [PostgresArray(Array(Set(renderOf.values)))]
        ).rows {
            renders[try row.string("id")] = (RenderStatus(rawValue: try row.string("status")) ?? .failed, row["job_id"].flatMap(Int64.init))
        }
        var refused: [Int64: RetryRefusal] = [:]
        for (job, renderID) in renderOf {
            guard let render = renders[renderID] else {
                refused[job] = RetryRefusal(reason: "its render no longer exists")
                continue
            }
            switch render.status {
            case .failed:
                refused[job] = RetryRefusal(
                    reason: "its render has failed: retry the render (render.retry), which reserves its credit again",
                    instead: "dispatcher render retry \(renderID)")
            case .complete:
                refused[job] = RetryRefusal(reason: "its render is complete")
            case .pending, .processing:
                if render.jobID != job {
                    refused[job] = RetryRefusal(reason: "its render runs another job", instead: render.jobID.map { "dispatcher job \($0)" })
                }
            }
        }
        return refused
    }
}
