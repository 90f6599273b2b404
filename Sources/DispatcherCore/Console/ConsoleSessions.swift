import CSodium
import FleetPostgres
import Foundation

/// The console's logins, kept in `console_sessions` so that any dispatcher behind a load
/// balancer serves any session and a logout (or expiry) ends it on all of them. The cookie holds
/// 32 random bytes; the table holds only their BLAKE2b-256 digest, so a read of the table (a
/// backup, a replica) gives nobody a session. A session names its access token, not the token
/// itself: its role is the token's role now, and revoking the token ends its sessions.
struct ConsoleSessions: Sendable {
    /// A session's secret as the cookie carries it: 64 hex digits.
    struct Secret: Sendable, Equatable {
        let hex: String

        init?(cookie: String) {
            guard cookie.utf8.count == 64, cookie.utf8.allSatisfy({ (48...57).contains($0) || (97...102).contains($0) }) else { return nil }
            hex = cookie
        }

        static func random() -> Secret {
            var bytes = [UInt8](repeating: 0, count: 32)
            randombytes_buf(&bytes, bytes.count)
            return Secret(cookie: bytes.hexString)!
        }

        var digestHex: String { AccessTokens.digest(hex).hexString }

        /// The session's CSRF token: a keyed digest of the secret, so no row or memory holds it and
        /// every dispatcher derives the same one. It proves a form came from a page of this session.
        var csrfToken: String {
            var out = [UInt8](repeating: 0, count: 32)
            let key = Array(hex.utf8)
            let message = Array("wearbloom-console-csrf".utf8)
            _ = crypto_generichash(&out, out.count, message, UInt64(message.count), key, key.count)
            return out.hexString
        }
    }

    let pool: PostgresPool
    let lifetime: Duration

    /// Starts a session for a token's name; returns its secret. Expired rows go at the same time
    /// (the index on `expires_at` makes that cheap), so the table holds live sessions only.
    func start(tokenName: String) async throws -> Secret {
        let secret = Secret.random()
        try await pool.query("DELETE FROM console_sessions WHERE expires_at < now()")
        try await pool.query(
            "INSERT INTO console_sessions (secret_hash, token_name, expires_at) VALUES (decode($1, 'hex'), $2, now() + make_interval(secs => $3))",
            [secret.digestHex, tokenName, Double(lifetime.components.seconds)])
        return secret
    }

    /// The token name of a live session; nil when unknown or expired.
    func tokenName(of secret: Secret) async throws -> String? {
        try await pool.query(
            "SELECT token_name FROM console_sessions WHERE secret_hash = decode($1, 'hex') AND expires_at > now()",
            [secret.digestHex]).rows.first?["token_name"]
    }

    func end(_ secret: Secret) async throws {
        try await pool.query("DELETE FROM console_sessions WHERE secret_hash = decode($1, 'hex')", [secret.digestHex])
    }
}

/// Equal texts compared in constant time (CSRF tokens).
func constantTimeEqual(_ a: String, _ b: String) -> Bool {
    let left = Array(a.utf8), right = Array(b.utf8)
    return left.count == right.count && sodium_memcmp(left, right, left.count) == 0
}
