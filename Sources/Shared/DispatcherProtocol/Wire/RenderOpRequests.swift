import Foundation

/// One render as the protocol shows it (`render.request`, `render.status`, `render.wait`,
/// `renders.list`). Optional fields are sent as explicit nulls.
public struct RenderView: Codable, Sendable, Equatable {
    /// Where a render stands; `complete` and `failed` are terminal.
    public enum Status: String, Codable, Sendable {
        case pending, processing, complete, failed

        public var isTerminal: Bool { self == .complete || self == .failed }
    }

    public let id: String
    /// nil while an unlinked onboarding token owns the render.
    @ExplicitNull public private(set) var userId: String?
    public let garmentId: String
    public let bodyPhotoId: String
    /// `tops`, `bottoms`, `dresses`, `shoes` or `outerwear`.
    public let category: String
    public let provider: String
    public let status: Status
    @ExplicitNull public private(set) var jobId: Int64?
    /// Below the storage root, e.g. `u1/renders/r1.jpg`, once complete.
    @ExplicitNull public private(set) var resultPath: String?
    /// A presigned GET of the result (5 minutes), once complete, in `render.status` and
    /// `render.wait` when the store is S3 and the caller's role is `submit` or `operate`; null otherwise.
    @ExplicitNull public private(set) var resultUrl: String?
    /// `RENDER_FAILED` or `RENDER_TIMEOUT` once failed.
    @ExplicitNull public private(set) var errorCode: String?
    /// Why it failed, once failed: one of the fleet's failure codes (`PROVIDER_DOWN`, `TIMEOUT`,
    /// `PROVIDER_REJECTED`, `IMAGE_INVALID`…, docs/protocol.md); null otherwise, and for renders
    /// failed before the fleet recorded reasons.
    @ExplicitNull public private(set) var failureCode: String?
    /// The failure for people (never a secret, at most 500 characters); null unless failed.
    @ExplicitNull public private(set) var errorMessage: String?
    /// Whether a credit pays for it (false for subscribers and onboarding tokens).
    public let charged: Bool
    /// The garment image sent to the provider: its cut-out (true), or its normalised photo
    /// (false: background removal ended without a cut-out, or none was stored); null until the
    /// render has read its inputs.
    @ExplicitNull public private(set) var garmentCutout: Bool?
    /// `up` or `down` once the person has rated it.
    @ExplicitNull public private(set) var feedback: String?
    public let deadlineAt: Date
    public let createdAt: Date
    public let updatedAt: Date

    public init(
        id: String, userId: String?, garmentId: String, bodyPhotoId: String, category: String, provider: String, status: Status,
        jobId: Int64?, resultPath: String?, errorCode: String?, failureCode: String? = nil, errorMessage: String? = nil, charged: Bool,
        garmentCutout: Bool? = nil, feedback: String?, deadlineAt: Date, createdAt: Date, updatedAt: Date, resultUrl: String? = nil
    ) {
        self.resultUrl = resultUrl
        self.garmentCutout = garmentCutout
        self.id = id
        self.userId = userId
        self.garmentId = garmentId
        self.bodyPhotoId = bodyPhotoId
        self.category = category
        self.provider = provider
        self.status = status
        self.jobId = jobId
        self.resultPath = resultPath
        self.errorCode = errorCode
        self.failureCode = failureCode
        self.errorMessage = errorMessage
        self.charged = charged
        self.feedback = feedback
        self.deadlineAt = deadlineAt
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }

    public var isTerminal: Bool { status.isTerminal }
}

/// `render.request`: one garment on one body photo, for a user or an onboarding token.
/// Validated, the credit reserved, and the render with its job created in one transaction.
public struct RequestRenderRequest: DispatcherRequest {
    public static let op = "render.request"
    public typealias Result = RenderView
    /// The caller's id for the render; asking again with the same id returns the first render.
    public let renderId: String
    /// Exactly one of `userId` and `ephemeralToken`.
    public let userId: String?
    public let ephemeralToken: String?
    /// The storage tree holding the photos: default `userId`; with a token it is always the
    /// token's id (`token.issue`'s `tokenId`), where the onboarding photos were normalised.
    public let ownerId: String?
    public let garmentId: String
    public let bodyPhotoId: String
    /// The upload the body photo `bodyPhotoId` is still to be normalised from: the request
    /// enqueues that normalisation and the render runs after it. Omitted: the photo exists.
    public let bodyUploadId: String?
    /// The upload the garment `garmentId` is still to be made from: the request enqueues its
    /// normalisation and then its cut-out, and the render runs after both (with the normalised
    /// photo when the cut-out ends without one). Omitted: the garment exists.
    public let garmentUploadId: String?
    /// `tops`, `bottoms`, `dresses`, `shoes` or `outerwear`.
    public let category: String
    /// Where the fleet POSTs the render's signed end once it is complete or failed
    /// (docs/protocol.md, "Completion callbacks"); its host must be in `FLEET_OUTBOUND_HOSTS`.
    public let callbackUrl: String?
    /// Ids of jobs the render also runs after (at most 100, as `enqueue`'s `after`), besides the
    /// jobs still making its photos, which the dispatcher finds itself.
    public let after: [Int64]?

    public init(
        renderId: String, userId: String? = nil, ephemeralToken: String? = nil, ownerId: String? = nil,
        garmentId: String, bodyPhotoId: String, category: String, callbackUrl: String? = nil,
        bodyUploadId: String? = nil, garmentUploadId: String? = nil, after: [Int64]? = nil
    ) {
        self.after = after
        self.callbackUrl = callbackUrl
        self.bodyUploadId = bodyUploadId
        self.garmentUploadId = garmentUploadId
        self.renderId = renderId
        self.userId = userId
        self.ephemeralToken = ephemeralToken
        self.ownerId = ownerId
        self.garmentId = garmentId
        self.bodyPhotoId = bodyPhotoId
        self.category = category
    }
}

/// `render.status`: one render by id.
public struct RenderStatusRequest: DispatcherRequest {
    public static let op = "render.status"
    public typealias Result = RenderView
    public let renderId: String
    public init(renderId: String) { self.renderId = renderId }
}

/// `render.wait`: answers when the render is complete or failed, or when `timeoutMs` has passed.
public struct WaitRenderRequest: DispatcherRequest {
    public static let op = "render.wait"
    public struct Result: Codable, Sendable {
        public let render: RenderView
        /// true: the render had not ended when the wait ended (timeout, or the server shutting down).
        public let timedOut: Bool
        public init(render: RenderView, timedOut: Bool) {
            self.render = render
            self.timedOut = timedOut
        }
    }
    public let renderId: String
    /// Default 30,000; at most 300,000 (as `wait`).
    public let timeoutMs: Int?

    public init(renderId: String, timeoutMs: Int? = nil) {
        self.renderId = renderId
        self.timeoutMs = timeoutMs
    }
}

/// `render.feedback`: thumbs up or down on a complete render; a thumbs-down refunds its credit once.
public struct RenderFeedbackRequest: DispatcherRequest {
    public static let op = "render.feedback"
    public enum Vote: String, Codable, Sendable, WireEnum { case up, down }
    public struct Result: Codable, Sendable, Equatable {
        public let renderId: String
        public let vote: Vote
        /// true only for the call that gave the credit back.
        public let refunded: Bool
        public init(renderId: String, vote: Vote, refunded: Bool) {
            self.renderId = renderId
            self.vote = vote
            self.refunded = refunded
        }
    }
    public let renderId: String
    /// The render's owner: feedback on someone else's render is `NOT_FOUND`.
    public let userId: String
    public let vote: Vote
    /// The quick category the person picked (e.g. `fit`, `colour`, `quality`), at most 64 characters.
    public let category: String?

    public init(renderId: String, userId: String, vote: Vote, category: String? = nil) {
        self.renderId = renderId
        self.userId = userId
        self.vote = vote
        self.category = category
    }
}

/// `renders.list`: a user's renders, newest first, for the app's "waiting / done" views.
public struct ListRendersRequest: DispatcherRequest {
    public static let op = "renders.list"
    public static let defaultLimit = 50
    public static let maxLimit = 500
    public struct Result: Codable, Sendable {
        public let renders: [RenderView]
        public init(renders: [RenderView]) { self.renders = renders }
    }
    public let userId: String
    /// Default 50, at most 500.
    public let limit: Int?

    public init(userId: String, limit: Int? = nil) {
        self.userId = userId
        self.limit = limit
    }
}

/// `token.issue`: a new onboarding token, good for one free render until it expires.
public struct IssueTokenRequest: DispatcherRequest {
    public static let op = "token.issue"
    public struct Result: Codable, Sendable, Equatable {
        /// The secret for the app; shown once, only its hash is stored.
        public let token: String
        public let tokenId: String
        public let expiresAt: Date
        public init(token: String, tokenId: String, expiresAt: Date) {
            self.token = token
            self.tokenId = tokenId
            self.expiresAt = expiresAt
        }
    }
    public init() {}
}

/// `account.link`: an onboarding token joins a new account: its render moves to the user, who
/// gets the configured free credits once.
public struct LinkAccountRequest: DispatcherRequest {
    public static let op = "account.link"
    public struct Result: Codable, Sendable, Equatable {
        public let userId: String
        /// The onboarding render now the user's, if the token had one.
        @ExplicitNull public private(set) var renderId: String?
        public let creditsGranted: Int
        public init(userId: String, renderId: String?, creditsGranted: Int) {
            self.userId = userId
            self.renderId = renderId
            self.creditsGranted = creditsGranted
        }
    }
    public let ephemeralToken: String
    public let userId: String

    public init(ephemeralToken: String, userId: String) {
        self.ephemeralToken = ephemeralToken
        self.userId = userId
    }
}
