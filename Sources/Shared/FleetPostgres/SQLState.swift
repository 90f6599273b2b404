/// A PostgreSQL error's SQLSTATE (the server's `C` field; PostgreSQL's documentation, Appendix A).
/// The codes the fleet acts on are named here and nowhere else.
public struct SQLState: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String

    public init(rawValue: String) { self.rawValue = rawValue }

    public var description: String { rawValue }

    /// 23505: an insert or update met a unique index's row (an id or a name already taken).
    public static let uniqueViolation = Self(rawValue: "23505")
    /// 22P02: a value that does not parse as its type (a payload that is not JSON).
    public static let invalidTextRepresentation = Self(rawValue: "22P02")
    /// 40001: a serializable transaction lost to a concurrent one; the server rolled it back.
    public static let serializationFailure = Self(rawValue: "40001")
    /// 40P01: the server broke a deadlock by rolling this transaction back.
    public static let deadlockDetected = Self(rawValue: "40P01")
    /// 57P01 / 57P02 / 57P03: the server is shutting down, crashed, or is still starting.
    public static let adminShutdown = Self(rawValue: "57P01")
    public static let crashShutdown = Self(rawValue: "57P02")
    public static let cannotConnectNow = Self(rawValue: "57P03")
    /// XX000: what an error reads as when the server sent no code.
    public static let internalError = Self(rawValue: "XX000")

    /// Class 22, data exception: a value the database cannot store (out of range, NUL in text…),
    /// the caller's input rather than the server's state.
    public var isDataException: Bool { rawValue.hasPrefix("22") }

    /// Class 08, connection exception.
    public var isConnectionException: Bool { rawValue.hasPrefix("08") }

    /// The transaction was rolled back whole to settle a conflict with another (a deadlock, a
    /// serialization failure): the same transaction run again starts from nothing and may pass.
    public var isConflict: Bool { self == .deadlockDetected || self == .serializationFailure }
}
