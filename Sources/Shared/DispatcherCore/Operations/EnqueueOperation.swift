import FleetCallbacks
import DispatcherProtocol
import FleetQueue
import FleetSupport
import Foundation

/// `enqueue`: any known job kind with its payload object. With the group commit, a request is
/// answered from the batch's commit (`start`), without a task of its own.
public struct EnqueueOperation: AnsweringOperation {
    public var access: OperationAccess { .submitters }
    let submitter: JobSubmitter

    public init(enqueuer: any JobEnqueuer, outbound: OutboundSettings = .off) { submitter = JobSubmitter(enqueuer: enqueuer, outbound: outbound) }

    public func run(_ request: EnqueueRequest) async throws -> EnqueuedJobResult {
        let job = try job(kind: request.kind, payload: request.payload ?? [:], options: request.options, field: "args")
        let enqueued = try await submitter.enqueuer.enqueue(job)
        return EnqueuedJobResult(jobId: enqueued.id, kind: request.kind, isNew: enqueued.isNew)
    }

    public var answersWithoutTask: Bool { submitter.enqueuer is any AnsweringEnqueuer }

    public func start(_ request: EnqueueRequest, answer: @escaping @Sendable (Result<EnqueuedJobResult, any Error>) -> Void) {
        guard let enqueuer = submitter.enqueuer as? any AnsweringEnqueuer else {
            return answer(.failure(DispatcherError(.internal, "enqueue started without an answering enqueuer")))
        }
        let job: NewJob
        do {
            job = try self.job(kind: request.kind, payload: request.payload ?? [:], options: request.options, field: "args")
        } catch {
            return answer(.failure(error))
        }
        enqueuer.enqueue(job) { enqueued in
            answer(enqueued.map { EnqueuedJobResult(jobId: $0.id, kind: request.kind, isNew: $0.isNew) })
        }
    }

    /// The job `enqueue` would insert, checked; `field`: where the client wrote it, for errors.
    func job(kind name: String, payload: [String: JSONValue], options: JobOptions?, field: String, afterField: String? = nil) throws -> NewJob {
        let kind = JobKind(rawValue: name)
        // Its events are signed by the fleet: only the database makes them, from a real ending.
        if kind == .callbackDeliver {
            throw DispatcherError(.badArgument, "callback.deliver jobs are made by the fleet when a job or render with a callbackUrl ends; give options.callbackUrl instead")
        }
        if kind == .httpRequest { try checkHTTPRequest(payload, field: field) }
        return try submitter.job(kind: kind, payload: payload, options: options, field: field, afterField: afterField)
    }

    /// An `http.request` that could never be sent (a URL outside the allow-list, an unknown
    /// secret, a bad method) is refused now rather than queued to die.
    private func checkHTTPRequest(_ payload: [String: JSONValue], field: String) throws {
        // Signed with their own secret, never the callbacks' one: without it none can be sent.
        if submitter.outbound.isOn, submitter.outbound.httpJobSigner == nil {
            throw DispatcherError(.badArgument, "http.request jobs are off: the dispatcher has no FLEET_HTTP_JOB_SECRET to sign them with")
        }
        let decoded: HTTPRequestPayload
        do {
            decoded = try JSONDecoder().decode(HTTPRequestPayload.self, from: JSONEncoder().encode(payload))
        } catch {
            throw DispatcherError(.badArgument, "\(field).payload is not an http.request payload: \(error)")
        }
        do {
            _ = try decoded.request(policy: submitter.outbound.policy, secrets: submitter.outbound.secrets)
        } catch {
            throw DispatcherError(.badArgument, "\(field).payload.\(error)")
        }
    }
}
