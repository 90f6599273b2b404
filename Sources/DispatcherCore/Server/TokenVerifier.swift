import CSodium

/// Checks `auth` tokens against the shared secret in constant time: both sides are hashed to
/// 32 bytes first, so neither the comparison nor the lengths leak how close a guess was.
struct TokenVerifier: Sendable {
    private let expected: [UInt8]?

    init(token: String?) {
        precondition(sodium_init() >= 0, "libsodium failed to initialise")
        expected = token.map(Self.digest)
    }

    /// False when no token is configured: then nothing authenticates over TCP.
    func verify(_ candidate: String) -> Bool {
        guard let expected else { return false }
        let actual = Self.digest(candidate)
        return sodium_memcmp(actual, expected, actual.count) == 0
    }

    private static func digest(_ text: String) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        let bytes = Array(text.utf8)
        _ = crypto_generichash(&out, out.count, bytes, UInt64(bytes.count), nil, 0)
        return out
    }
}
