import CSodium
import FleetPostgres
import FleetQueue
import FleetStorage
import Foundation
import Imaging
import RenderLedger

/// Onboarding tokens: a random secret handed to the app at first launch, stored only as its
/// BLAKE2b hash (libsodium), good for one free render until it expires or is linked. A render
/// that fails for a technical reason (`RenderFailureCode.isTechnical`) gives the render back, as
/// it gives a credit back, at most `technicalFailuresAllowed` times; a complete render, or one
/// refused for its photo, spends it.
public struct EphemeralTokens: Sendable {
    /// How many renders of one token may fail for technical reasons and still leave it its free
    /// render: a broken provider cannot be looped through one token (docs/product.md).
    public static let technicalFailuresAllowed = 3

    let pool: PostgresPool
    public let ttl: Duration

    public init(pool: PostgresPool, ttl: Duration) {
        precondition(sodium_init() >= 0, "libsodium failed to initialise")
        self.pool = pool
        self.ttl = ttl
    }

    public struct Issued: Sendable, Codable, Equatable {
        /// The secret; shown once, never stored.
        public let token: String
        public let tokenID: String
        public let expiresAt: Date

        /// The protocol's JSON names.
        enum CodingKeys: String, CodingKey {
            case token, tokenID = "tokenId", expiresAt
        }
    }

    public func issue() async throws -> Issued {
        var secret = [UInt8](repeating: 0, count: 32)
        randombytes_buf(&secret, secret.count)
        let token = "eph_" + Data(secret).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        let id = Self.tokenID(of: token)
        let row = try await pool.query("""
            INSERT INTO ephemeral_tokens (id, token_hash, expires_at) VALUES ($1, decode($2, 'hex'), now() + make_interval(secs => $3))
            RETURNING extract(epoch FROM expires_at) AS expires_at
            """, [id, Self.hex(Self.hash(token)), ttl.seconds]).rows[0]
        return Issued(token: token, tokenID: id, expiresAt: try row.date("expires_at"))
    }

    /// The id of a live, unlinked token, or nil (unknown, expired or already linked).
    static func liveTokenID(_ token: String, on connection: PostgresConnection) async throws -> String? {
        try await connection.query("""
            SELECT id FROM ephemeral_tokens
            WHERE token_hash = decode($1, 'hex') AND expires_at > now() AND linked_user_id IS NULL
            FOR UPDATE
            """, [hex(hash(token))]).rows.first?["id"]
    }

    /// The id of a live, unlinked token, or nil: the storage tree its onboarding uploads go to.
    public func liveTokenID(of token: String) async throws -> String? {
        try await pool.withConnection { try await Self.liveTokenID(token, on: $0) }
    }

    /// Why the token (locked by `liveTokenID`) has no free render left, or nil when it has: a
    /// render of it is open, complete or failed on its photo's account, or `technicalFailuresAllowed`
    /// of its renders failed for technical reasons. Run in the transaction that creates the render.
    static func spentRefusal(_ tokenID: String, on connection: PostgresConnection) async throws -> RenderRequestError? {
        var technicalFailures = 0
        for row in try await connection.query(
            "SELECT status::text AS status, failure_code FROM renders WHERE ephemeral_token_id = $1", [tokenID]
        ).rows {
            // A render failed before reasons were recorded counts as spending the token.
            let technical = try row.string("status") == RenderStatus.failed.rawValue
                && row["failure_code"].flatMap(RenderFailureCode.init(rawValue:))?.isTechnical == true
            guard technical else { return .tokenAlreadyUsed }
            technicalFailures += 1
        }
        return technicalFailures >= technicalFailuresAllowed ? .tokenTechnicalFailuresExhausted(technicalFailures) : nil
    }

    public enum LinkOutcome: Sendable, Equatable {
        /// Linked: the onboarding render (if any) now belongs to the user, credits granted.
        case linked(renderId: String?, creditsGranted: Int)
        case invalidToken
    }

    /// Links a token to a new account, once: its render moves to the user (its files stay in
    /// the token's storage tree, named by the render's `owner_id`; the tree is the user's from
    /// now on, and `account.purge` of the user deletes it, `AccountErasure`), and the user gets
    /// `freeCredits` once (ledger key `grant:link:{tokenId}`).
    public func link(token: String, userID: String, freeCredits: Int) async throws -> LinkOutcome {
        try await pool.withConnection { connection in
            try await connection.transaction { connection in
                guard let tokenID = try await Self.liveTokenID(token, on: connection) else { return .invalidToken }
                try await connection.query(
                    "UPDATE ephemeral_tokens SET linked_user_id = $2, linked_at = now() WHERE id = $1", [tokenID, userID])
                // Every render of the token moves; the one named is the one that spent it (else
                // the newest of those that failed).
                let render = try await connection.query("""
                    WITH moved AS (
                        UPDATE renders SET user_id = $2, ephemeral_token_id = NULL, updated_at = now()
                        WHERE ephemeral_token_id = $1 RETURNING id, status, created_at
                    )
                    SELECT id FROM moved ORDER BY status <> 'failed' DESC, created_at DESC, id DESC LIMIT 1
                    """, [tokenID, userID]).rows.first?["id"]
                let granted = try await CreditLedger.grantOnce(key: "grant:link:\(tokenID)", user: userID, amount: freeCredits, on: connection)
                    ? freeCredits : 0
                return .linked(renderId: render, creditsGranted: granted)
            }
        }
    }

    /// A token's id, derived from its hash: also the storage tree of its onboarding photos.
    public static func tokenID(of token: String) -> String { "eph-" + hex(Array(hash(token).prefix(8))) }

    /// What one pass of `deleteExpired` removed.
    public struct Expired: Sendable, Equatable {
        public var tokenIDs: [String] = []
        public var renderIDs: [String] = []
        /// Storage trees handed to `account.purge`, with the purge job of each.
        public var purges: [String: Int64] = [:]
    }

    /// Deletes up to `limit` expired, never-linked tokens and their renders in one transaction,
    /// releasing any credit reservation those renders held (ledger key `release:{id}`, so
    /// nothing is settled twice), and enqueues an `account.purge` for each storage tree those
    /// renders used, and for each token's own tree (`tokenID(of:)`, where onboarding uploads go
    /// even when no render was requested), that nothing else names: no remaining render (as owner or user), no account
    /// (credits, subscriptions, ledger, reservations, linked tokens). A token whose render is
    /// still running before its deadline waits for a later pass.
    public static func deleteExpired(limit: Int, pool: PostgresPool) async throws -> Expired {
        try await pool.withConnection { connection in
            try await connection.transaction { connection in
                var expired = Expired()
                expired.tokenIDs = try await connection.query("""
                    SELECT id FROM ephemeral_tokens t
                    WHERE expires_at <= now() AND linked_user_id IS NULL AND NOT EXISTS (
                        SELECT 1 FROM renders r WHERE r.ephemeral_token_id = t.id
                        AND r.status IN ('pending', 'processing') AND r.deadline_at > now())
                    ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED
                    """, [limit]).rows.map { try $0.string("id") }
                guard !expired.tokenIDs.isEmpty else { return expired }
                let renders = try await connection.query(CreditLedger.deleteRenders, [PostgresArray(expired.tokenIDs), PostgresArray([String]())]).rows
                expired.renderIDs = try renders.map { try $0.string("id") }
                try await connection.query("DELETE FROM ephemeral_tokens WHERE id = ANY($1::text[])", [PostgresArray(expired.tokenIDs)])
                let trees = try await connection.query("""
                    SELECT DISTINCT tree FROM unnest($1::text[]) AS tree
                    WHERE NOT EXISTS (SELECT 1 FROM renders WHERE owner_id = tree OR user_id = tree)
                      AND NOT EXISTS (SELECT 1 FROM credits WHERE user_id = tree)
                      AND NOT EXISTS (SELECT 1 FROM subscriptions WHERE user_id = tree)
                      AND NOT EXISTS (SELECT 1 FROM credit_ledger WHERE user_id = tree)
                      AND NOT EXISTS (SELECT 1 FROM credit_reservations WHERE user_id = tree)
                      AND NOT EXISTS (SELECT 1 FROM ephemeral_tokens WHERE linked_user_id = tree)
                    ORDER BY tree
                    """, [PostgresArray(try renders.map { try $0.string("owner_id") } + expired.tokenIDs)]).rows.map { try $0.string("tree") }
                // Owners were validated as storage ids when their renders were requested.
                let owners = trees.compactMap { try? StorageID($0) }
                let jobs = try owners.map { try NewJob(PurgeAccountPayload(userID: $0)) }
                let enqueued = try await JobQueue.enqueue(jobs, in: connection)
                expired.purges = Dictionary(uniqueKeysWithValues: zip(owners.map(\.value), enqueued.map(\.id)))
                return expired
            }
        }
    }

    static func hash(_ token: String) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        let bytes = Array(token.utf8)
        crypto_generichash(&out, out.count, bytes, UInt64(bytes.count), nil, 0)
        return out
    }

    static func hex(_ bytes: [UInt8]) -> String { bytes.hexString }
}
