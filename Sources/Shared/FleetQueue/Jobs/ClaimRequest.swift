public struct ClaimRequest: Sendable {
    public var owner: String
    public var lease: Duration
    public var slots: [JobKind: Int]
    /// nil: any queue.
    public var queues: [String]?
    /// Kinds whose jobs may carry limit keys: claimed under the limits' lock while a rule
    /// exists, the others by the one-statement claim that pays nothing for limits.
    public var limitedKinds: Set<JobKind>
    /// Where the claims of kinds without limits start (`ClaimFrontier`); nil: at the index's start.
    public var frontiers: ClaimFrontiers?

    public init(
        owner: String, lease: Duration, slots: [JobKind: Int], queues: [String]? = nil, limitedKinds: Set<JobKind> = [],
        frontiers: ClaimFrontiers? = nil
    ) {
        self.owner = owner
        self.lease = lease
        self.slots = slots
        self.queues = queues
        self.limitedKinds = limitedKinds
        self.frontiers = frontiers
    }
}

/// What a claim took, and which limited kinds a limit held back (due jobs left waiting for a
/// slot): their workers claim again when a slot may have freed instead of waiting for new jobs.
public struct ClaimResult: Sendable {
    public var jobs: [ClaimedJob]
    public var heldBack: Set<JobKind>
    /// Whether the claim of limited kinds found any limit rule: the driver's next claim of them
    /// goes straight under the rules' lock, or by the one statement.
    public var limitsExist: Bool

    public init(jobs: [ClaimedJob], heldBack: Set<JobKind> = [], limitsExist: Bool = false) {
        self.jobs = jobs
        self.heldBack = heldBack
        self.limitsExist = limitsExist
    }
}

public struct LeaseRenewal: Sendable, Equatable {
    /// Jobs still held; the others were taken away (rescued, finished, deleted).
    public var kept: Set<Int64>
    /// Held jobs someone asked to cancel.
    public var cancelRequested: Set<Int64>
}
