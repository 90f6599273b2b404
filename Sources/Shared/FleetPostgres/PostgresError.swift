/// Errors of the PostgreSQL layer. Messages come from libpq and the server; they never carry
/// the connection string, so a password in `DATABASE_URL` cannot reach a log.
public enum PostgresError: Error, CustomStringConvertible, Sendable {
    /// The connection string could not be parsed.
    case invalidConnectionString(String)
    /// A new connection could not be opened (server down, refused, auth failed).
    case connectionFailed(String)
    /// An open connection broke (server restarted, network cut). Safe to retry on a new one.
    case connectionLost(String)
    /// The server rejected a statement.
    case server(sqlState: SQLState, message: String, detail: String?)
    /// A result column held something the caller could not decode.
    case decoding(column: String, value: String?, expected: String)

    public var description: String {
        switch self {
        case .invalidConnectionString(let message): "invalid PostgreSQL connection string: \(message)"
        case .connectionFailed(let message): "cannot connect to PostgreSQL: \(message)"
        case .connectionLost(let message): "PostgreSQL connection lost: \(message)"
        case .server(let state, let message, let detail):
            "PostgreSQL error \(state): \(message)" + (detail.map { " (\($0))" } ?? "")
        case .decoding(let column, let value, let expected):
            "column \(column) holds \(value.map { "'\($0)'" } ?? "NULL"), expected \(expected)"
        }
    }

    /// True when the statement may succeed on a fresh connection: the link broke, or the
    /// server is shutting down, starting up or in recovery.
    public var isTransient: Bool {
        switch self {
        case .connectionFailed, .connectionLost: true
        case .server(let state, _, _):
            state.isConnectionException || state.isConflict || [.adminShutdown, .crashShutdown, .cannotConnectNow].contains(state)
        case .invalidConnectionString, .decoding: false
        }
    }
}
