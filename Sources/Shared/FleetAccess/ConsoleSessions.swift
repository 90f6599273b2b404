import CSodium
import FleetPostgres
import FleetSupport
import Foundation

/// The console's logins, kept in `console_sessions` so that any dispatcher behind a load
/// balancer serves any session and a logout (or expiry) ends it on all of them. The cookie holds
/// 32 random bytes; the table holds only their BLAKE2b-256 digest, so a read of the table (a
/// backup, a replica) gives nobody a session. A session holds its access token's digest, not the
/// token nor its name: its caller is whoever that token is now, and revoking the token ends its
/// sessions (within the tokens' refresh interval).
public struct ConsoleSessions: Sendable {
    /// A session's secret as the cookie carries it: 64 hex digits.
    public struct Secret: Sendable, Equatable {
        public let hex: String

        public init?(cookie: String) {
            guard cookie.utf8.count == 64, cookie.utf8.allSatisfy({ (48...57).contains($0) || (97...102).contains($0) }) else { return nil }
            hex = cookie
        }

        public static func random() -> Secret {
            var bytes = [UInt8](repeating: 0, count: 32)
            randombytes_buf(&bytes, bytes.count)
            return Secret(cookie: bytes.hexString)!
        }

        var digestHex: String { AccessTokens.digest(hex).hexString }

        /// The session's CSRF token: a keyed digest of the secret, so no row or memory holds it and
        /// every dispatcher derives the same one. It proves a form came from a page of this session.
        public var csrfToken: String {
            var out = [UInt8](repeating: 0, count: 32)
            let key = Array(hex.utf8)
            let message = Array("wearbloom-console-csrf".utf8)
            _ = crypto_generichash(&out, out.count, message, UInt64(message.count), key, key.count)
            return out.hexString
        }
    }

    let pool: PostgresPool
    let lifetime: Duration

    public init(pool: PostgresPool, lifetime: Duration) {
        self.pool = pool
        self.lifetime = lifetime
    }

    /// Starts a session for the token with this digest; returns its secret. Expired rows go at
    /// the same time (the index on `expires_at` makes that cheap), so the table holds live sessions
    /// only. The token's name is kept beside its digest for a dispatcher of the previous release,
    /// which finds sessions by name, during a rolling upgrade.
    public func start(tokenDigest: [UInt8], tokenName: String) async throws -> Secret {
        let secret = Secret.random()
        try await pool.query("DELETE FROM console_sessions WHERE expires_at < now()")
        try await pool.query("""
            INSERT INTO console_sessions (secret_hash, token_hash, token_name, expires_at)
            VALUES (decode($1, 'hex'), decode($2, 'hex'), $3, now() + make_interval(secs => $4))
            """, [secret.digestHex, tokenDigest.hexString, tokenName, Double(lifetime.components.seconds)])
        return secret
    }

    /// The token digest of a live session; nil when unknown, expired, or made by a dispatcher of
    /// the previous release (no digest).
    public func tokenDigest(of secret: Secret) async throws -> [UInt8]? {
        guard let hex: String = try await pool.query(
            "SELECT encode(token_hash, 'hex') AS token_hash FROM console_sessions WHERE secret_hash = decode($1, 'hex') AND expires_at > now()",
            [secret.digestHex]).rows.first?["token_hash"]
        else { return nil }
        return [UInt8](hexString: hex)
    }

    public func end(_ secret: Secret) async throws {
        try await pool.query("DELETE FROM console_sessions WHERE secret_hash = decode($1, 'hex')", [secret.digestHex])
    }
}

/// Equal texts compared in constant time (CSRF tokens).
public func constantTimeEqual(_ a: String, _ b: String) -> Bool {
    let left = Array(a.utf8), right = Array(b.utf8)
    return left.count == right.count && sodium_memcmp(left, right, left.count) == 0
}
