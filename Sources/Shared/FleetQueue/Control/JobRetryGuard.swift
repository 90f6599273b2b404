import FleetPostgres

/// Decides which finished jobs of its kinds an operator's retry (`job.retry`, `jobs.retry`) may
/// put back. Whether running a job again makes sense is known to the module that owns what the
/// job works on (a `render.run` job whose render has ended must not run again: the render is
/// retried as a whole, its credit reserved again); the queue asks, and knows nothing of why.
/// Asked inside the transaction that holds the candidates locked, so that no other retry of the
/// same jobs can slip in between the answer and the update.
public protocol JobRetryGuard: Sendable {
    /// The kinds it decides for; the jobs of other kinds are retried as they are.
    var kinds: Set<JobKind> { get }
    /// Of `candidates` (dead or cancelled jobs of `kinds`), those to leave as they are, by id.
    func refusals(of candidates: [RetryCandidate], on connection: PostgresConnection) async throws -> [Int64: RetryRefusal]
}

/// A job an operator's retry would put back, as its kind's `JobRetryGuard` is shown it.
public struct RetryCandidate: Sendable, Equatable {
    public let id: Int64
    public let kind: JobKind
    /// Its payload, as JSON text.
    public let payload: String
}

/// Why a `JobRetryGuard` leaves a job as it is.
public struct RetryRefusal: Sendable, Hashable {
    /// The cause, in the same words for every job left alone for it: a bulk retry counts by it.
    public let reason: String
    /// What to do instead for this job (`dispatcher render retry r1`), if anything.
    public let instead: String?

    public init(reason: String, instead: String? = nil) {
        self.reason = reason
        self.instead = instead
    }
}

/// What a bulk retry did (or, for a dry run, would do): how many it retried, and the matching
/// jobs its guards left alone, by reason.
public struct BulkRetryOutcome: Sendable, Equatable {
    public struct LeftAlone: Sendable, Equatable {
        public let reason: String
        public var count: Int
        /// The first few of them (at most `JobControl.sampleSize`), oldest first.
        public var sampleJobIDs: [Int64]
    }

    public var retried = 0
    /// In the order the reasons were first met.
    public var leftAlone: [LeftAlone] = []

    mutating func leave(_ id: Int64, _ refusal: RetryRefusal) {
        if let index = leftAlone.firstIndex(where: { $0.reason == refusal.reason }) {
            leftAlone[index].count += 1
            if leftAlone[index].sampleJobIDs.count < JobControl.sampleSize { leftAlone[index].sampleJobIDs.append(id) }
        } else {
            leftAlone.append(LeftAlone(reason: refusal.reason, count: 1, sampleJobIDs: [id]))
        }
    }
}

/// One batch of a guarded bulk retry.
public struct GuardedRetryBatch: Sendable, Equatable {
    /// Candidates looked at (locked), up to the batch's limit: fewer means none are left.
    public let scanned: Int
    /// The highest id looked at: the next batch starts after it.
    public let lastID: Int64?
    /// Retried (or, for a dry run, that would be), by id.
    public let retried: [Int64]
    public let refused: [Int64: RetryRefusal]

    public init(scanned: Int, lastID: Int64?, retried: [Int64], refused: [Int64: RetryRefusal]) {
        self.scanned = scanned
        self.lastID = lastID
        self.retried = retried
        self.refused = refused
    }
}
