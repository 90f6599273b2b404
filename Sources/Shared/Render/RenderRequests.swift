import Foundation

/// Who asks for a render: an account, or an app at first launch with its onboarding token.
public enum Requester: Sendable, Equatable {
    case user(String)
    case ephemeralToken(String)
}

public struct RenderRequest: Sendable {
    /// The caller's id for the render (a cuid2 from the backend): asking twice with the same id
    /// returns the first render instead of charging twice.
    public var renderId: StorageID
    public var requester: Requester
    /// The storage tree holding the photos (the user's id, or the tree the onboarding upload used).
    public var ownerId: StorageID
    public var garmentId: StorageID
    public var bodyPhotoId: StorageID
    public var category: GarmentCategory

    public init(renderId: StorageID, requester: Requester, ownerId: StorageID, garmentId: StorageID, bodyPhotoId: StorageID, category: GarmentCategory) {
        self.renderId = renderId
        self.requester = requester
        self.ownerId = ownerId
        self.garmentId = garmentId
        self.bodyPhotoId = bodyPhotoId
        self.category = category
    }
}

/// Why a render request was refused; nothing was charged and no provider was called.
public enum RenderRequestError: CodedError, Equatable, CustomStringConvertible {
    case invalidCategory(String)
    case insufficientCredits
    case subscriptionExpired
    /// Unknown, expired or already linked onboarding token.
    case invalidToken
    /// The token's one free render was already requested.
    case tokenAlreadyUsed

    public var code: String {
        switch self {
        case .invalidCategory: RenderErrorCode.invalidCategory.rawValue
        case .insufficientCredits: RenderErrorCode.insufficientCredits.rawValue
        case .subscriptionExpired: RenderErrorCode.subscriptionExpired.rawValue
        case .invalidToken: "INVALID_TOKEN"
        case .tokenAlreadyUsed: "TOKEN_ALREADY_USED"
        }
    }

    public var description: String {
        switch self {
        case .invalidCategory(let reason): "\(code): \(reason)"
        case .insufficientCredits: "\(code): no credit left"
        case .subscriptionExpired: "\(code): the subscription has expired and no credit is left"
        case .invalidToken: "\(code): the onboarding token is unknown, expired or already linked"
        case .tokenAlreadyUsed: "\(code): the onboarding token's free render was already requested"
        }
    }
}

/// Accepts render requests: gating, credit reservation, the render row and its job, in one
/// transaction, before any provider is called.
public struct RenderRequests: Sendable {
    let pool: PostgresPool
    /// From request to `RENDER_TIMEOUT` (PRODUCT.md: 30 s).
    public let deadline: Duration
    /// Apple's billing grace period: a `subscribed` subscription still counts this long after `expires_at`.
    public let billingGrace: Duration
    /// Which categories each provider supports, by name (the providers themselves need credentials to build).
    public let supportedCategories: @Sendable (String) -> Set<GarmentCategory>

    public init(
        pool: PostgresPool, deadline: Duration = .seconds(30), billingGrace: Duration = .seconds(16 * 86_400),
        supportedCategories: @escaping @Sendable (String) -> Set<GarmentCategory> = TryOnProviders.supportedCategories
    ) {
        self.pool = pool
        self.deadline = deadline
        self.billingGrace = billingGrace
        self.supportedCategories = supportedCategories
    }

    /// The render (new, or the earlier one with the same id), or a refusal.
    public func request(_ request: RenderRequest) async throws -> RenderRecord {
        let settings = try await RenderSettings.load(from: pool)
        guard settings.enabledCategories.contains(request.category) else {
            throw RenderRequestError.invalidCategory("\(request.category.rawValue) is not enabled")
        }
        guard supportedCategories(settings.provider).contains(request.category) else {
            throw RenderRequestError.invalidCategory("\(request.category.rawValue) is not supported by the provider \(settings.provider)")
        }
        let store = RenderStore(pool: pool)
        if let existing = try await store.render(id: request.renderId.value) { return existing }
        do {
            try await pool.withConnection { connection in
                try await connection.transaction { connection in
                    try await insert(request, provider: settings.provider, on: connection)
                }
            }
        } catch PostgresError.server(let state, _, let detail) where state == "23505" {
            // Unique violation: the same render id raced in, or the token's render exists.
            if let existing = try await store.render(id: request.renderId.value) { return existing }
            if detail?.contains("ephemeral_token_id") == true { throw RenderRequestError.tokenAlreadyUsed }
            throw RenderRequestError.tokenAlreadyUsed
        }
        guard let render = try await store.render(id: request.renderId.value) else {
            throw QueueError.internalMismatch("render \(request.renderId) vanished after its insert")
        }
        return render
    }

    private func insert(_ request: RenderRequest, provider: String, on connection: PostgresConnection) async throws {
        var userID: String?
        var tokenID: String?
        var charged = false
        switch request.requester {
        case .ephemeralToken(let token):
            guard let id = try await EphemeralTokens.liveTokenID(token, on: connection) else { throw RenderRequestError.invalidToken }
            tokenID = id
        case .user(let user):
            userID = user
            charged = try await !isSubscriber(user, on: connection)
            if charged { try await reserveCredit(user: user, render: request.renderId.value, on: connection) }
        }
        try await connection.query("""
            INSERT INTO renders (id, user_id, ephemeral_token_id, owner_id, garment_id, body_photo_id, category, provider, charged, deadline_at)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, now() + make_interval(secs => $10))
            """, [request.renderId.value, userID, tokenID, request.ownerId.value, request.garmentId.value,
                  request.bodyPhotoId.value, request.category.rawValue, provider, charged, deadline.seconds])
        let job = try await PostgresQueueDriver.insertMany([
            try NewJob(kind: .renderRun, encoding: ["renderId": request.renderId.value], priority: 1, maxAttempts: 10,
                       idempotencyKey: "render:\(request.renderId.value)"),
        ], on: connection)[0]
        try await connection.query("UPDATE renders SET job_id = $2 WHERE id = $1", [request.renderId.value, job.id])
    }

    /// Trial or paid and not expired; cancelled until the period ends; paid within Apple's billing grace.
    private func isSubscriber(_ user: String, on connection: PostgresConnection) async throws -> Bool {
        try await connection.query("""
            SELECT 1 FROM subscriptions WHERE user_id = $1 AND (
                (status IN ('trial', 'subscribed', 'cancelled') AND expires_at > now())
                OR (status = 'subscribed' AND expires_at + make_interval(secs => $2) > now()))
            LIMIT 1
            """, [user, billingGrace.seconds]).rows.count == 1
    }

    /// Locks the user's credits row first: the count of open reservations that follows is a
    /// new statement, so it sees every reservation committed before the lock was granted.
    private func reserveCredit(user: String, render: String, on connection: PostgresConnection) async throws {
        let locked = try await connection.query(
            "SELECT total_granted - total_consumed AS balance FROM credits WHERE user_id = $1 FOR UPDATE", [user]).rows.first
        let reserved = try await connection.query(
            "SELECT count(*) AS n FROM credit_reservations WHERE user_id = $1", [user]).rows[0]
        guard let locked, try locked.int("balance") - reserved.int("n") >= 1 else {
            let expired = try await connection.query(
                "SELECT 1 FROM subscriptions WHERE user_id = $1 AND status IN ('expired', 'subscribed', 'cancelled', 'trial') LIMIT 1", [user]).rows
            throw expired.isEmpty ? RenderRequestError.insufficientCredits : RenderRequestError.subscriptionExpired
        }
        try await connection.query("INSERT INTO credit_reservations (render_id, user_id) VALUES ($1, $2)", [render, user])
        try await connection.query("""
            INSERT INTO credit_ledger (key, user_id, render_id, entry, amount) VALUES ('reserve:' || $1, $2, $1, 'reserve', 1)
            """, [render, user])
    }
}
