import FleetPostgres
import FleetQueue
import FleetStorage
import FleetSupport
import Foundation
import Imaging
import Metrics
import Providers
import RenderLedger

/// Who asks for a render: an account, or an app at first launch with its onboarding token.
public enum Requester: Sendable, Equatable {
    case user(String)
    case ephemeralToken(String)
}

public struct RenderRequest: Sendable {
    /// The caller's id for the render (a cuid2 from the backend): asking twice with the same id
    /// returns the first render instead of charging twice.
    public var renderID: StorageID
    public var requester: Requester
    /// The storage tree holding the photos (the user's id, or the tree the onboarding upload used).
    public var ownerID: StorageID
    public var garmentID: StorageID
    public var bodyPhotoID: StorageID
    public var category: GarmentCategory
    /// Where the fleet POSTs the render's signed end (`callback.deliver`, enqueued by the
    /// database when the render completes or fails); the caller checked it against the allow-list.
    public var callbackURL: String?
    /// Photos still to be made from uploads: the render runs after their jobs (`RenderInputs`).
    public var uploads = RenderUploads()
    /// Jobs the caller names for the render to run after, besides those making its photos (at
    /// most `NewJob.maxDependencies` in all; each must exist and not have ended `dead` or
    /// `cancelled`, else `QueueError` and nothing is created).
    public var after: [Int64] = []

    public init(renderID: StorageID, requester: Requester, ownerID: StorageID, garmentID: StorageID, bodyPhotoID: StorageID, category: GarmentCategory) {
        self.renderID = renderID
        self.requester = requester
        self.ownerID = ownerID
        self.garmentID = garmentID
        self.bodyPhotoID = bodyPhotoID
        self.category = category
    }
}

/// Why a render request was refused; nothing was charged and no provider was called.
public enum RenderRequestError: Error, Equatable, CustomStringConvertible {
    case invalidCategory(String)
    case insufficientCredits
    case subscriptionExpired
    /// Unknown, expired or already linked onboarding token.
    case invalidToken
    /// The token's one free render was already requested (open, complete, or failed on its
    /// photo's account).
    case tokenAlreadyUsed
    /// The token's renders failed for technical reasons this many times: no more free renders
    /// on it (`EphemeralTokens.technicalFailuresAllowed`). Answered as `TOKEN_ALREADY_USED`.
    case tokenTechnicalFailuresExhausted(Int)
    /// The render id is another requester's render: nothing of it is disclosed.
    case renderIdConflict
    /// At the provider's capacity now, the render could not finish within its deadline:
    /// nothing reserved, nothing queued (`RenderAdmission`).
    case busy(retryAfterSeconds: Int)
    /// A kind the render runs (`render.run`, or an input's) is paused by an operator: it would
    /// only time out in the queue. Nothing reserved, nothing queued.
    case paused(kinds: [JobKind], retryAfterSeconds: Int)

    /// What went wrong, for people; the code travels beside it.
    public var message: String {
        switch self {
        case .invalidCategory(let reason): reason
        case .insufficientCredits: "no credit left"
        case .subscriptionExpired: "the subscription has expired and no credit is left"
        case .invalidToken: "the onboarding token is unknown, expired or already linked"
        case .tokenAlreadyUsed: "the onboarding token's free render was already requested"
        case .tokenTechnicalFailuresExhausted(let failures):
            "the onboarding token's renders failed for technical reasons \(failures) times; it has no free render left"
        case .renderIdConflict: "the render id is taken; choose another"
        case .busy(let seconds): "the provider is busy: the render could not finish in time; try again in \(seconds) s"
        case .paused(let kinds, let seconds):
            "\(kinds.map(\.rawValue).joined(separator: ", ")) \(kinds.count == 1 ? "is" : "are") paused by an operator: the render could not finish in time; try again in \(seconds) s"
        }
    }

    public var description: String { message }
}

/// Accepts render requests: gating (the category, the provider's capacity), then the render row,
/// its job and the credit reservation in one transaction, before any provider is called.
public struct RenderRequests: Sendable {
    let pool: PostgresPool
    /// From request to `RENDER_TIMEOUT` (docs/product.md, "Renders": 30 s).
    public let deadline: Duration
    /// Apple's billing grace period: a `subscribed` subscription still counts this long after `expires_at`.
    public let billingGrace: Duration
    /// Which categories each provider supports, by name (the providers themselves need credentials to build).
    public let supportedCategories: @Sendable (String) -> Set<GarmentCategory>

    /// Admission from the estimate the dispatcher keeps: a request reads no load of its own.
    let admission: RenderAdmission

    /// The attempts a render's `render.run` job has (only infrastructure errors spend them).
    static let runAttempts = 10

    /// `admission` must be running (`RenderAdmission.run`).
    public init(
        pool: PostgresPool, admission: RenderAdmission, deadline: Duration = .seconds(30), billingGrace: Duration = CreditBalances.appleBillingGrace,
        supportedCategories: @escaping @Sendable (String) -> Set<GarmentCategory> = TryOnProviders.supportedCategories
    ) {
        self.pool = pool
        self.admission = admission
        self.deadline = deadline
        self.billingGrace = billingGrace
        self.supportedCategories = supportedCategories
    }

    /// The render (new, or the earlier one with the same id), or a refusal.
    public func request(_ request: RenderRequest) async throws -> RenderRecord {
        // The settings and the provider's load come from the kept estimate: a refused request
        // reads only whether its id is known, an admitted one writes its render.
        let estimate = try await admission.estimate()
        let settings = estimate.settings
        guard settings.enabledCategories.contains(request.category) else {
            throw RenderRequestError.invalidCategory("\(request.category.rawValue) is not enabled")
        }
        guard supportedCategories(settings.provider).contains(request.category) else {
            throw RenderRequestError.invalidCategory("\(request.category.rawValue) is not supported by the provider \(settings.provider)")
        }
        // Its inputs, made first, take their recent run times out of its deadline.
        let inputWait = request.uploads.isEmpty ? .zero : RenderInputs.expectedWait(for: request.uploads, runTimes: estimate.inputRunTimes)
        let ticket: RenderAdmission.Ticket
        do {
            ticket = try admission.admit(inputWait: inputWait, deadline: deadline, needs: RenderInputs.kinds(runBy: request.uploads))
        } catch let refusal as RenderRequestError {
            // A render asked again with its id is answered whatever the load: refuse only new ones.
            if let existing = try await earlierRender(request) { return existing }
            Self.countBusy(provider: settings.provider)
            throw refusal
        }
        do {
            let render = try await pool.transactionRetryingConflicts { connection in
                try await insert(request, provider: settings.provider, on: connection) { pending in
                    // Photos named by id still being made count as uploads do: a render that
                    // cannot make its deadline behind them is refused now, its transaction undone.
                    let pendingWait = RenderInputs.expectedWait(pending: pending, runTimes: estimate.inputRunTimes)
                    try admission.refuseIfPaused(pending, deadline: deadline)
                    if pendingWait > inputWait { try admission.readmit(ticket, inputWait: pendingWait, deadline: deadline) }
                }
            }
            admission.ended(ticket, committed: true)
            // After the commit (see `PostgresPool.notify`); lost, it costs the workers' next poll.
            try? await pool.notify(QueueChannel.jobs, request.uploads.isEmpty ? .renderRun : .imageNormalize)
            return render
        } catch {
            admission.ended(ticket, committed: false)
            if let refusal = error as? RenderRequestError, case .busy = refusal {
                Self.countBusy(provider: settings.provider)
                throw error
            }
            // The same render id again, found by its unique violation (or asked again after the
            // token was linked or spent): the first render is the answer, charged once. A unique
            // violation for another id is the token's one render, already made.
            let uniqueViolation = if case PostgresError.server(.uniqueViolation, _, _) = error { true } else { false }
            let tokenRefused = switch error as? RenderRequestError {
            case .invalidToken, .tokenAlreadyUsed, .tokenTechnicalFailuresExhausted: true
            default: false
            }
            guard uniqueViolation || tokenRefused else { throw error }
            if let existing = try await earlierRender(request) { return existing }
            throw uniqueViolation ? RenderRequestError.tokenAlreadyUsed : error
        }
    }

    /// The render already asked with the request's id, if any; `renderIdConflict` when it is
    /// another requester's.
    private func earlierRender(_ request: RenderRequest) async throws -> RenderRecord? {
        guard let existing = try await RenderStore(pool: pool).render(id: request.renderID) else { return nil }
        guard try await isRequested(existing, by: request.requester) else { throw RenderRequestError.renderIdConflict }
        return existing
    }

    /// Whether `render` is the requester's own: the user's, or the token's (still held by the
    /// token, or moved to the account the token was linked to).
    private func isRequested(_ render: RenderRecord, by requester: Requester) async throws -> Bool {
        switch requester {
        case .user(let user):
            return render.userID == user
        case .ephemeralToken(let token):
            let tokenID = EphemeralTokens.tokenID(of: token)
            if render.ephemeralTokenID == tokenID { return true }
            guard let owner = render.userID else { return false }
            return try await !pool.query(
                "SELECT 1 FROM ephemeral_tokens WHERE id = $1 AND linked_user_id = $2", [tokenID, owner]).rows.isEmpty
        }
    }

    private static func countBusy(provider: String) {
        Counter(label: "fleet_render_busy_total", dimensions: [("provider", provider)]).increment()
    }

    /// Its inputs' jobs (enqueued, or found still pending), its job (after them), the render with its job's id, then for a
    /// charged render the lock and the reservation: the user's `credits` row is locked only for the last statement and the
    /// commit, since concurrent requests of one user queue on that lock.
    ///
    /// `checkInputs`: told the kinds of the jobs still making the photos named by id, and may
    /// refuse the render (throwing) before its job is enqueued.
    private func insert(
        _ request: RenderRequest, provider: String, on connection: PostgresConnection, checkInputs: (Set<JobKind>) throws -> Void
    ) async throws -> RenderRecord {
        var userID: String?
        var tokenID: String?
        switch request.requester {
        case .ephemeralToken(let token):
            guard let id = try await EphemeralTokens.liveTokenID(token, on: connection) else { throw RenderRequestError.invalidToken }
            if let refusal = try await EphemeralTokens.spentRefusal(id, on: connection) { throw refusal }
            tokenID = id
        case .user(let user):
            userID = user
        }
        let inputs = try await RenderInputs.prepare(for: request, on: connection)
        try checkInputs(inputs.pendingKinds)
        var run = try NewJob(RenderRunPayload(renderID: request.renderID, cutoutJobID: inputs.cutoutJobID), priority: 1, maxAttempts: Self.runAttempts,
                             idempotencyKey: "render:\(request.renderID.value)",
                             limitKeys: RenderCapacity.limitKeys(provider: provider, requester: userID ?? tokenID ?? ""))
        run.after = inputs.jobIDs
        // The job first, so the render row is written once, with its job. A render id asked
        // again finds its job by key here and fails on the render's primary key below.
        let job = try await JobQueue.enqueue([run], announce: false, in: connection)[0]
        // Charged unless a user subscribes (`CreditLedger.subscribesNow`). Onboarding renders are never charged.
        let render = try RenderStore.record(try await connection.query("""
            INSERT INTO renders (id, user_id, ephemeral_token_id, owner_id, garment_id, body_photo_id, category, provider, charged, deadline_at,
                                 callback_url, job_id)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $2::text IS NOT NULL AND NOT \(CreditLedger.subscribesNow(user: "$2", grace: "$10")),
                    now() + make_interval(secs => $9), $11, $12)
            RETURNING \(RenderStore.columns)
            """, [request.renderID.value, userID, tokenID, request.ownerID.value, request.garmentID.value,
                  request.bodyPhotoID.value, request.category.rawValue, provider, deadline.seconds, billingGrace.seconds, request.callbackURL, job.id]
        ).rows[0])
        if render.charged, let userID { try await Self.reserveCredit(user: userID, render: request.renderID.value, on: connection) }
        return render
    }

    /// Reserves the render's credit (`CreditLedger.reserve`; `retries`: an operator's retry of
    /// it), or says why not; the rollback of a refusal undoes the render and its job (or the retry).
    static func reserveCredit(user: String, render: String, retries: Int = 0, on connection: PostgresConnection) async throws {
        let reserved = try await CreditLedger.reserve(user: user, render: render, retries: retries, on: connection)
        guard reserved else {
            let expired = try await connection.query(
                "SELECT 1 FROM subscriptions WHERE user_id = $1 AND status IN ('expired', 'subscribed', 'cancelled', 'trial') LIMIT 1", [user]).rows
            throw expired.isEmpty ? RenderRequestError.insufficientCredits : RenderRequestError.subscriptionExpired
        }
    }
}
