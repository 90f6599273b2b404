import CLibPQ
import Foundation

/// The notifier's session connection: a raw `PGconn *` owned and used by the notifier's
/// thread alone, which blocks on it (hence not `Sendable`).
final class ListenConnection {
    private let handle: OpaquePointer

    init(conninfo: String, applicationName: String) throws {
        handle = try PostgresConnection.openHandle(conninfo, applicationName: applicationName)
    }

    deinit { PQfinish(handle) }

    var socket: Int32 { PQsocket(handle) }

    /// Runs `LISTEN` or `UNLISTEN` on `channel` (quoted as an identifier); false when it failed.
    func execute(_ command: String, _ channel: String) -> Bool {
        guard let quoted = PQescapeIdentifier(handle, channel, channel.utf8.count) else { return false }
        defer { PQfreemem(quoted) }
        let result = PQexec(handle, "\(command) \(String(cString: quoted))")
        defer { PQclear(result) }
        return PQresultStatus(result) == PGRES_COMMAND_OK
    }

    /// Runs a parameterised statement; the number of rows it returned, nil when it failed (the
    /// statement's own error, or the link's: `isHealthy()` tells them apart).
    func rows(_ sql: String, _ parameters: [String?]) -> Int? {
        let result = withOptionalCStringArray(parameters) { values in
            PQexecParams(handle, sql, Int32(parameters.count), nil, values, nil, nil, 0)
        }
        defer { PQclear(result) }
        guard PQresultStatus(result) == PGRES_TUPLES_OK else { return nil }
        return Int(PQntuples(result))
    }

    /// The server's message for the last statement that failed.
    var lastError: String { String(cString: PQerrorMessage(handle)).trimmingCharacters(in: .whitespacesAndNewlines) }

    /// Reads what the server sent; false when the link failed.
    func consumeInput() -> Bool { PQconsumeInput(handle) != 0 }

    /// The next notification libpq has read, if any.
    func nextNotification() -> (channel: String, payload: String)? {
        guard let notification = PQnotifies(handle) else { return nil }
        defer { PQfreemem(notification) }
        return (String(cString: notification.pointee.relname), String(cString: notification.pointee.extra))
    }

    func isHealthy() -> Bool {
        let result = PQexec(handle, "SELECT 1")
        defer { PQclear(result) }
        return PQresultStatus(result) == PGRES_TUPLES_OK
    }

    /// `pg_listening_channels()` of this session, sorted; nil when the link failed.
    func listeningChannels() -> [String]? {
        let result = PQexec(handle, "SELECT pg_listening_channels() ORDER BY 1")
        defer { PQclear(result) }
        guard PQresultStatus(result) == PGRES_TUPLES_OK else { return nil }
        return (0..<PQntuples(result)).map { String(cString: PQgetvalue(result, $0, 0)) }
    }
}
