import CSodium
import FleetPostgres
import FleetSupport
import Foundation
import Synchronization

/// The login form's anti-forgery value. The form and a cookie carry the same value (double
/// submit), and the value must be one the server issued: `<expiry>.<nonce>.<mac>`, the MAC keyed
/// with the fleet's login key (`console_keys`, one for every dispatcher, so a form from one is
/// accepted by another). A value the client made up, or one older than `lifetime`, is refused.
/// Nothing is stored per form: showing the login page costs no write.
public final class ConsoleLoginForms: Sendable {
    public static let lifetime = 3600

    private let pool: PostgresPool
    private let key = Mutex<[UInt8]?>(nil)

    public init(pool: PostgresPool) { self.pool = pool }

    /// A fresh value, valid for `lifetime` seconds from `now`.
    public func issue(now: Date = Date()) async throws -> String {
        var nonce = [UInt8](repeating: 0, count: 16)
        randombytes_buf(&nonce, nonce.count)
        let signed = "\(Int(now.timeIntervalSince1970) + Self.lifetime).\(nonce.hexString)"
        return signed + "." + Self.mac(signed, key: try await loginKey())
    }

    /// Whether `value` is a value this fleet issued and it has not expired.
    public func isValid(_ value: String, now: Date = Date()) async throws -> Bool {
        let parts = value.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[1].utf8.count == 32, parts[2].utf8.count == 64, let expiry = Int(parts[0]),
              expiry >= Int(now.timeIntervalSince1970), expiry <= Int(now.timeIntervalSince1970) + Self.lifetime
        else { return false }
        return constantTimeEqual(Self.mac("\(parts[0]).\(parts[1])", key: try await loginKey()), String(parts[2]))
    }

    private func loginKey() async throws -> [UInt8] {
        if let known = key.withLock({ $0 }) { return known }
        guard let hex: String = try await pool.query("SELECT encode(login_key, 'hex') AS login_key FROM console_keys").rows.first?["login_key"],
              let loaded = [UInt8](hexString: hex), loaded.count >= 16
        else { throw ConsoleKeyMissing() }
        key.withLock { $0 = loaded }
        return loaded
    }

    private static func mac(_ text: String, key: [UInt8]) -> String {
        var out = [UInt8](repeating: 0, count: 32)
        let message = Array("wearbloom-console-login|\(text)".utf8)
        _ = crypto_generichash(&out, out.count, message, UInt64(message.count), key, key.count)
        return out.hexString
    }
}

/// `console_keys` has no row: the schema was not migrated (migration 12).
public struct ConsoleKeyMissing: Error, CustomStringConvertible {
    public var description: String { "the console's login key is missing (console_keys): run `dispatcher migrate`" }
}
