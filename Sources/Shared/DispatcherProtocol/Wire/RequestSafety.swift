/// Which requests a client may send again when the connection broke after it sent them and
/// before the answer came: it cannot know whether the dispatcher applied them. Reads are safe;
/// so are writes that carry their own identity, which the dispatcher answers the same way twice
/// (a render's id, a job's idempotency key). Everything else is answered `connectionLost`, so
/// the caller decides. The Node client keeps the same list (clients/node/index.js).
extension DispatcherRequest {
    public var isSafeToRepeat: Bool { false }
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
/// The render id makes a second `render.request` answer with the first one's render.
extension RequestRenderRequest { public var isSafeToRepeat: Bool { true } }

extension EnqueueRequest { public var isSafeToRepeat: Bool { options?.idempotencyKey != nil } }
extension NormalizeImageRequest { public var isSafeToRepeat: Bool { options?.idempotencyKey != nil } }
extension ProcessGarmentRequest { public var isSafeToRepeat: Bool { options?.idempotencyKey != nil } }
extension PurgeAccountRequest { public var isSafeToRepeat: Bool { options?.idempotencyKey != nil } }
