import CSodium
import DispatcherProtocol
import FleetPostgres
import FleetSupport
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// Who sent a request: an access token's name and role (the Unix socket is `unix-socket`,
/// `operate`: its file permissions are its access control).
public struct Caller: Sendable, Equatable {
    public let name: String
    public let role: AccessRole

    public static let unixSocket = Caller(name: "unix-socket", role: .operate)

    /// The caller of the request being run, for the audit trail (set by the connection).
    @TaskLocal public static var current: Caller?
}

/// The access tokens a dispatcher accepts: the named tokens of `access_tokens` that are not
/// revoked, re-read every `refreshInterval` (a token created or revoked takes effect on every
/// dispatcher within it, no restart), plus `FLEET_DISPATCHER_TOKEN` as the `operate` token named
/// `default`. A token is known by its digest everywhere (connections, console sessions), never by
/// its name: the names only label it. Only digests are held and compared; a token is never logged.
public final class AccessTokens: Service, Sendable {
    public static let defaultTokenName = "default"
    /// Names the system gives callers: no table token may take one, or the audit trail could not
    /// tell it from them.
    public static let reservedNames: Set<String> = [defaultTokenName, Caller.unixSocket.name]
    private let environmentToken: [UInt8]?
    private let store: AccessTokenStore?
    private let refreshInterval: Duration
    private let logger: Logger
    /// Digest (hex) → caller, from the table.
    private let named = Mutex<[String: Caller]>([:])

    public init(environmentToken: String?, store: AccessTokenStore?, refreshInterval: Duration = .seconds(2), logger: Logger) {
        precondition(sodium_init() >= 0, "libsodium failed to initialise")
        self.environmentToken = environmentToken.map(Self.digest)
        self.store = store
        self.refreshInterval = refreshInterval
        self.logger = logger
    }

    /// Reads the table once (before serving, so the first `auth` already knows every token).
    public func load() async throws {
        guard let store else { return }
        let active = try await store.active()
        named.withLock { $0 = active }
    }

    public func run() async throws {
        guard let store else { return }
        await warnAboutRenamedTokens(store)
        await cancelWhenGracefulShutdown {
            await repeatEvery(self.refreshInterval) {
                do { try await self.load() } catch { self.logger.warning("access tokens not refreshed", metadata: ["error": "\(error)"]) }
            }
        }
    }

    /// The caller a token authenticates, with the digest to check it again later; nil if unknown.
    public func authenticate(_ token: String) -> (caller: Caller, digest: [UInt8])? {
        let digest = Self.digest(token)
        guard let caller = caller(for: digest) else { return nil }
        return (caller, digest)
    }

    /// The caller while its token is valid: nil once revoked.
    public func caller(for digest: [UInt8]) -> Caller? {
        // Constant time against the environment's token; the table's are looked up by digest,
        // which tells a guesser nothing about any token (it cannot choose a digest's bytes).
        if let environmentToken, sodium_memcmp(digest, environmentToken, digest.count) == 0 {
            return Caller(name: Self.defaultTokenName, role: .operate)
        }
        return named.withLock { $0[digest.hexString] }
    }

    /// Tokens that had a reserved name before the upgrade that reserved it keep working under a
    /// new name: said once at start, so that the operator who used the old name learns the new one.
    private func warnAboutRenamedTokens(_ store: AccessTokenStore) async {
        guard let renamed = try? await store.list().filter({ $0.renamedFrom != nil && $0.revokedAt == nil }), !renamed.isEmpty else { return }
        for token in renamed {
            logger.warning("an access token had a name the system reserves and was renamed; it works as before", metadata: [
                "token": "\(token.name)", "renamed_from": "\(token.renamedFrom ?? "")", "role": "\(token.role.rawValue)",
            ])
        }
    }

    public static func digest(_ text: String) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        let bytes = Array(text.utf8)
        _ = crypto_generichash(&out, out.count, bytes, UInt64(bytes.count), nil, 0)
        return out
    }
}

/// The `access_tokens` table: create (the token shown once), list, revoke.
public struct AccessTokenStore: Sendable {
    public struct Token: Sendable, Equatable {
        public let name: String
        public let role: AccessRole
        public let createdAt: Date
        public let revokedAt: Date?
        /// The reserved name the token had before migration 12 renamed it (it kept working).
        public let renamedFrom: String?
    }

    public enum StoreError: Error, CustomStringConvertible, Equatable {
        case invalidName(String)
        case reservedName(String)
        case nameTaken(String)
        case notFound(String)

        public var description: String {
            switch self {
            case .invalidName(let name): "invalid token name '\(name.prefix(80))': 1 to 64 of A-Z a-z 0-9 . _ -"
            case .reservedName(let name):
                "the name '\(name)' is the system's (\(AccessTokens.reservedNames.sorted().joined(separator: ", "))): choose another"
            case .nameTaken(let name): "a token named '\(name)' exists (revoked names are kept: choose another)"
            case .notFound(let name): "no active token named '\(name)'"
            }
        }
    }

    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// Creates a token and returns it: the only time it is seen (the table keeps its digest).
    public func create(name: String, role: AccessRole) async throws -> String {
        guard (1...64).contains(name.utf8.count), name.utf8.allSatisfy({ Self.nameBytes.contains($0) }) else {
            throw StoreError.invalidName(name)
        }
        guard !AccessTokens.reservedNames.contains(name) else { throw StoreError.reservedName(name) }
        var secret = [UInt8](repeating: 0, count: 32)
        randombytes_buf(&secret, secret.count)
        let token = "wbt_" + secret.hexString
        do {
            try await pool.query("INSERT INTO access_tokens (name, role, token_hash) VALUES ($1, $2, decode($3, 'hex'))",
                                 [name, role.rawValue, AccessTokens.digest(token).hexString])
        } catch PostgresError.server(.uniqueViolation, _, _) {
            throw StoreError.nameTaken(name)
        }
        return token
    }

    public func list() async throws -> [Token] {
        try await pool.query("""
            SELECT name, role, extract(epoch FROM created_at) AS created_at, extract(epoch FROM revoked_at) AS revoked_at, renamed_from
            FROM access_tokens ORDER BY name
            """).rows.map { row in
            Token(name: try row.string("name"), role: AccessRole(rawValue: try row.string("role")) ?? .read,
                  createdAt: try row.date("created_at"), revokedAt: try row.optionalDate("revoked_at"), renamedFrom: row["renamed_from"])
        }
    }

    public func revoke(name: String) async throws {
        let changed = try await pool.query(
            "UPDATE access_tokens SET revoked_at = now() WHERE name = $1 AND revoked_at IS NULL", [name]).affectedRows
        guard changed == 1 else { throw StoreError.notFound(name) }
    }

    /// Digest (hex) → caller of every token not revoked.
    func active() async throws -> [String: Caller] {
        var callers: [String: Caller] = [:]
        for row in try await pool.query(
            "SELECT name, role, encode(token_hash, 'hex') AS digest FROM access_tokens WHERE revoked_at IS NULL").rows {
            guard let role = AccessRole(rawValue: try row.string("role")) else { continue }
            callers[try row.string("digest")] = Caller(name: try row.string("name"), role: role)
        }
        return callers
    }

    private static let nameBytes = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-".utf8)
}
