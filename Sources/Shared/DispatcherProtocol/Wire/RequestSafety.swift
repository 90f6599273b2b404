/// Which requests a client may send again when the connection broke after it sent them and
/// before the answer came: it cannot know whether the dispatcher applied them. Reads are safe;
/// so are writes that carry their own identity, which the dispatcher answers the same way twice
/// (a render's id, a job's idempotency key). Everything else is answered `connectionLost`, so
/// the caller decides. The Node client keeps the same list (clients/node/index.js).
extension DispatcherRequest {
    public var isSafeToRepeat: Bool { false }
    public func resent(after elapsed: Duration) -> Self { self }
}

/// What is left of a wait's timeout, at least 1 ms (0 would be a refused argument).
private func remainingMs(_ timeoutMs: Int?, default defaultMs: Int, after elapsed: Duration) -> Int {
    let elapsedMs = Int(elapsed.components.seconds * 1000) + Int(elapsed.components.attoseconds / 1_000_000_000_000_000)
    return max(1, (timeoutMs ?? defaultMs) - elapsedMs)
}

extension WaitRequest {
    public func resent(after elapsed: Duration) -> Self {
        WaitRequest(jobId: jobId, timeoutMs: remainingMs(timeoutMs, default: Self.defaultTimeoutMs, after: elapsed))
    }
}

extension WaitRenderRequest {
    public func resent(after elapsed: Duration) -> Self {
        // render.wait takes the same default as wait (docs/protocol.md).
        WaitRenderRequest(renderId: renderId, timeoutMs: remainingMs(timeoutMs, default: WaitRequest.defaultTimeoutMs, after: elapsed))
    }
}

extension PingRequest { public var isSafeToRepeat: Bool { true } }
extension StatusRequest { public var isSafeToRepeat: Bool { true } }
extension WaitRequest { public var isSafeToRepeat: Bool { true } }
extension StatsRequest { public var isSafeToRepeat: Bool { true } }
extension JobGetRequest { public var isSafeToRepeat: Bool { true } }
extension JobsListRequest { public var isSafeToRepeat: Bool { true } }
extension AuditListRequest { public var isSafeToRepeat: Bool { true } }
extension RenderStatusRequest { public var isSafeToRepeat: Bool { true } }
extension WaitRenderRequest { public var isSafeToRepeat: Bool { true } }
extension ListRendersRequest { public var isSafeToRepeat: Bool { true } }
extension CreditsGetRequest { public var isSafeToRepeat: Bool { true } }
/// The render id makes a second `render.request` answer with the first one's render.
extension RequestRenderRequest { public var isSafeToRepeat: Bool { true } }

extension EnqueueRequest { public var isSafeToRepeat: Bool { options?.idempotencyKey != nil } }
extension NormalizeImageRequest { public var isSafeToRepeat: Bool { options?.idempotencyKey != nil } }
extension ProcessGarmentRequest { public var isSafeToRepeat: Bool { options?.idempotencyKey != nil } }
extension PurgeAccountRequest { public var isSafeToRepeat: Bool { options?.idempotencyKey != nil } }
extension LimitsListRequest { public var isSafeToRepeat: Bool { true } }
/// Setting a rule to the same values twice leaves it as once.
extension LimitSetRequest { public var isSafeToRepeat: Bool { true } }
/// The graph's idempotency key makes a second `jobs.enqueueGraph` answer the first one's jobs.
extension EnqueueGraphRequest { public var isSafeToRepeat: Bool { idempotencyKey != nil } }
/// A presign changes nothing: a second one is another URL for the same object (or, without an
/// `uploadId`, for an upload id nobody uses).
extension UploadPresignRequest { public var isSafeToRepeat: Bool { true } }
extension ImageURLRequest { public var isSafeToRepeat: Bool { true } }
