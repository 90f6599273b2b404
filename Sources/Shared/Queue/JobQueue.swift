import Foundation

/// The queue as its callers see it: enqueue, look up, cancel. Workers use `WorkerRuntime`.
public struct JobQueue: Sendable {
    public let driver: any QueueDriver
    /// Kinds accepted by `enqueue`.
    public let knownKinds: Set<JobKind>

    public init(driver: any QueueDriver, knownKinds: Set<JobKind> = Set(JobKind.catalogue.keys)) {
        self.driver = driver
        self.knownKinds = knownKinds
    }

    /// Enqueues one job.
    public func enqueue(_ job: NewJob) async throws -> EnqueuedJob {
        try await enqueue([job])[0]
    }

    /// Enqueues many jobs in one round trip, all or none; results are in input order.
    public func enqueue(_ jobs: [NewJob]) async throws -> [EnqueuedJob] {
        for job in jobs { try validate(job) }
        return try await driver.jobInsertMany(jobs)
    }

    public func job(id: Int64) async throws -> JobRecord? { try await driver.jobGet(id: id) }

    public func cancel(id: Int64) async throws -> CancelResult { try await driver.jobCancel(id: id) }

    func validate(_ job: NewJob) throws {
        guard knownKinds.contains(job.kind) else { throw QueueError.unknownKind(job.kind.rawValue) }
        guard (0...9).contains(job.priority) else { throw QueueError.invalidJob("priority \(job.priority) is outside 0...9") }
        guard job.maxAttempts >= 1 else { throw QueueError.invalidJob("maxAttempts must be at least 1") }
        guard job.delay >= .zero else { throw QueueError.invalidJob("delay must not be negative") }
        guard !job.queue.isEmpty, job.queue.utf8.count <= 64 else { throw QueueError.invalidJob("queue name must be 1 to 64 bytes") }
        if let key = job.idempotencyKey, key.isEmpty || key.utf8.count > 255 {
            throw QueueError.invalidJob("idempotency key must be 1 to 255 bytes")
        }
        guard (try? JSONSerialization.jsonObject(with: Data(job.payload.utf8))) is [String: Any] else {
            throw QueueError.invalidJob("payload must be a JSON object")
        }
    }
}
