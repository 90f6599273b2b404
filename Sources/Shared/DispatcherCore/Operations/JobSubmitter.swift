import DispatcherProtocol
import FleetCallbacks
import FleetQueue
import FleetStorage
import Foundation

/// Enqueues one job for the enqueueing ops, turning the protocol's options into the queue's.
struct JobSubmitter: Sendable {
    let enqueuer: any JobEnqueuer
    /// What a `callbackUrl` and an `http.request` are checked against.
    let outbound: OutboundSettings

    /// Longest `delaySeconds`: far beyond any use, and well inside what a `Duration` holds.
    static let maxDelaySeconds = 366.0 * 86_400

    func submit(kind: JobKind, payload: some Encodable, options: JobOptions?) async throws -> EnqueuedJobResult {
        let enqueued = try await enqueuer.enqueue(try job(kind: kind, payload: payload, options: options, field: "args"))
        return EnqueuedJobResult(jobId: enqueued.id, kind: kind.rawValue, isNew: enqueued.isNew)
    }

    /// The job the options make, checked by the queue's rules (`NewJob.validate`); `field`: where
    /// the client wrote it (`args`, or a graph's `args.jobs[3]`), and `afterField` where its `after`
    /// ids are (a graph node's own `after`), for errors.
    func job(kind: JobKind, payload: some Encodable, options: JobOptions?, field: String, afterField: String? = nil) throws -> NewJob {
        let options = options ?? JobOptions()
        let delay = options.delaySeconds ?? 0
        guard (0...Self.maxDelaySeconds).contains(delay) else {
            throw DispatcherError(.badArgument, "\(field).options.delaySeconds must be between 0 and \(Int(Self.maxDelaySeconds))")
        }
        // Text parameters travel to libpq as C strings: a NUL would cut them short, silently.
        for (name, text) in [("kind", kind.rawValue), ("options.queue", options.queue), ("options.idempotencyKey", options.idempotencyKey)] {
            if let text, text.utf8.contains(0) { throw DispatcherError(.badArgument, "\(field).\(name) must not contain NUL") }
        }
        let defaults = NewJob(kind: kind)
        var job = try NewJob(
            kind: kind, encoding: payload, queue: options.queue ?? defaults.queue, priority: options.priority ?? defaults.priority,
            delay: .milliseconds(Int64((delay * 1000).rounded())), maxAttempts: options.maxAttempts ?? defaults.maxAttempts,
            idempotencyKey: options.idempotencyKey)
        job.limitKeys = options.limitKeys ?? []
        job.after = options.after ?? []
        if let url = options.callbackUrl {
            do { _ = try outbound.policy.destination(of: url) } catch {
                throw DispatcherError(.badArgument, "\(field).options.callbackUrl: \(error)")
            }
            job.callbackURL = url
        }
        do {
            try job.validate()
        } catch QueueError.invalidJob(let checked, let reason) {
            let path = switch checked {
            case .payload: "\(field).payload"
            case .delay: "\(field).options.delaySeconds"
            case .after: afterField ?? "\(field).options.after"
            default: "\(field).options.\(checked.rawValue)"
            }
            throw DispatcherError(.badArgument, "\(path) \(reason)")
        }
        return job
    }
}

/// The storage id a typed op's field must be, refused as a bad argument before anything is enqueued.
func storageID(_ value: String, field: String) throws -> StorageID {
    do {
        return try StorageID(value)
    } catch {
        throw DispatcherError(.badArgument, "args.\(field) must be 1 to 64 characters of A-Z a-z 0-9 _ -")
    }
}
