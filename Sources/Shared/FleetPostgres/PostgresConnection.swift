import CLibPQ
import Dispatch
import Foundation
import Synchronization

/// One libpq connection. libpq blocks, so every call runs on the connection's own serial
/// dispatch queue and resumes the caller by continuation: Swift's cooperative threads never
/// wait on the network.
public final class PostgresConnection: Sendable {
    /// A `PGconn *`, only ever touched on `queue`.
    private nonisolated(unsafe) let handle: OpaquePointer
    private let queue: DispatchQueue
    private let broken = Mutex(false)
    /// How parameterised statements reach the server.
    public let statements: StatementMode
    /// Statement text → prepared statement name, only touched on `queue`. The fleet's
    /// statements are fixed strings, so this stays small.
    private nonisolated(unsafe) var prepared: [String: String] = [:]

    private init(handle: OpaquePointer, queue: DispatchQueue, statements: StatementMode) {
        self.handle = handle
        self.queue = queue
        self.statements = statements
    }

    deinit {
        nonisolated(unsafe) let handle = self.handle
        queue.async { PQfinish(handle) }
    }

    /// Checks a connection string (URI or `key=value` conninfo) without connecting.
    public static func validate(conninfo: String) throws {
        var error: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(conninfo, &error) else {
            let message = error.map { String(cString: $0).trimmingCharacters(in: .whitespacesAndNewlines) } ?? "unparseable"
            if let error { PQfreemem(error) }
            throw PostgresError.invalidConnectionString(message)
        }
        PQconninfoFree(options)
    }

    /// Opens a connection. An empty `conninfo` means libpq's defaults: the `PG*` variables. With
    /// several hosts in it, libpq tries them in turn (`target_session_attrs=read-write` finds the
    /// primary), on every call.
    public static func connect(
        _ conninfo: String, applicationName: String = "wearbloom-fleet", statements: StatementMode = .prepared
    ) async throws -> PostgresConnection {
        try validate(conninfo: conninfo)
        let queue = DispatchQueue(label: "postgres.connection")
        return try await withCheckedThrowingContinuation { continuation in
            queue.async {
                continuation.resume(with: Result {
                    PostgresConnection(handle: try openHandle(conninfo, applicationName: applicationName), queue: queue, statements: statements)
                })
            }
        }
    }

    /// Opens a raw `PGconn *`, blocking the calling thread; the caller owns it.
    static func openHandle(_ conninfo: String, applicationName: String) throws -> OpaquePointer {
        // Defaults first: values in the expanded connection string and PG* variables win.
        var keywords = ["fallback_application_name", "dbname"]
        var values = [applicationName, conninfo]
        if ProcessInfo.processInfo.environment["PGCONNECT_TIMEOUT"] == nil {
            keywords.insert("connect_timeout", at: 0)
            values.insert("5", at: 0)
        }
        let handle = withCStringArray(keywords) { keywordPointers in
            withCStringArray(values) { valuePointers in PQconnectdbParams(keywordPointers, valuePointers, 1) }
        }
        guard let handle else { throw PostgresError.connectionFailed("out of memory") }
        guard PQstatus(handle) == CONNECTION_OK else {
            let message = String(cString: PQerrorMessage(handle)).trimmingCharacters(in: .whitespacesAndNewlines)
            PQfinish(handle)
            throw PostgresError.connectionFailed(message)
        }
        // Server notices ("relation already exists, skipping") are not for the fleet's logs.
        PQsetNoticeProcessor(handle, { _, _ in }, nil)
        return handle
    }

    /// True once the link failed; the pool drops such a connection instead of reusing it.
    public var isBroken: Bool { broken.withLock { $0 } }

    /// Reads whatever the server sent while the connection sat idle, without waiting: a
    /// server that restarted has sent its goodbye, and the connection is then known broken.
    public func isAlive() -> Bool {
        guard !isBroken else { return false }
        let alive = queue.sync { PQconsumeInput(handle) == 1 && PQstatus(handle) == CONNECTION_OK }
        if !alive { broken.withLock { $0 = true } }
        return alive
    }

    /// Runs one parameterised statement (`$1`, `$2`…); values travel apart from the SQL.
    @discardableResult
    public func query(_ sql: String, _ parameters: [(any PostgresEncodable)?] = [], planning: StatementPlanning = .preparedOnce) async throws -> PostgresResult {
        let texts = parameters.map { $0?.postgresText }
        return try await withCheckedThrowingContinuation { continuation in
            queue.async {
                continuation.resume(with: Result { try self.execute(sql, texts, planning: planning) })
            }
        }
    }

    /// Runs `body` inside BEGIN … COMMIT; any error rolls back.
    public func transaction<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        try await query("BEGIN")
        do {
            let value = try await body(self)
            try await query("COMMIT")
            return value
        } catch {
            if !isBroken { _ = try? await query("ROLLBACK") }
            throw error
        }
    }

    private func execute(_ sql: String, _ parameters: [String?], planning: StatementPlanning) throws -> PostgresResult {
        // Without parameters the simple protocol runs it, which also allows several statements.
        // With parameters the statement is prepared once per connection: parsing and planning
        // the hot statements (claim, finish) on every call would cost more than running them.
        // Behind a transaction pooler the connection is not one session, so a name prepared on
        // one server connection is unknown on the next: there each call is parsed unnamed.
        let result: OpaquePointer?
        if parameters.isEmpty {
            result = PQexec(handle, sql)
        } else if planning == .eachCall || statements == .unnamed {
            result = withOptionalCStringArray(parameters) { values in
                PQexecParams(handle, sql, Int32(parameters.count), nil, values, nil, nil, 0)
            }
        } else {
            let name = try prepare(sql, parameterCount: parameters.count)
            result = withOptionalCStringArray(parameters) { values in
                PQexecPrepared(handle, name, Int32(parameters.count), values, nil, nil, 0)
            }
        }
        guard let result else { throw lostConnection() }
        defer { PQclear(result) }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
            return decode(result)
        default:
            throw error(from: result)
        }
    }

    private func prepare(_ sql: String, parameterCount: Int) throws -> String {
        if let name = prepared[sql] { return name }
        let name = "fleet_\(prepared.count)"
        guard let result = PQprepare(handle, name, sql, Int32(parameterCount), nil) else { throw lostConnection() }
        defer { PQclear(result) }
        guard PQresultStatus(result) == PGRES_COMMAND_OK else { throw error(from: result) }
        prepared[sql] = name
        return name
    }

    private func error(from result: OpaquePointer) -> PostgresError {
        if PQstatus(handle) != CONNECTION_OK { return lostConnection() }
        let field = { (code: Character) -> String? in
            PQresultErrorField(result, Int32(code.asciiValue!)).map { String(cString: $0) }
        }
        return .server(
            sqlState: field("C").map(SQLState.init(rawValue:)) ?? .internalError,
            message: field("M") ?? String(cString: PQresultErrorMessage(result)),
            detail: field("D"))
    }

    private func lostConnection() -> PostgresError {
        broken.withLock { $0 = true }
        let message = String(cString: PQerrorMessage(handle)).trimmingCharacters(in: .whitespacesAndNewlines)
        return .connectionLost(message.isEmpty ? "no result from server" : message)
    }

    private func decode(_ result: OpaquePointer) -> PostgresResult {
        let rowCount = Int(PQntuples(result))
        let columnCount = Int(PQnfields(result))
        let columns = PostgresColumns(names: (0..<columnCount).map { String(cString: PQfname(result, Int32($0))) })
        var rows: [PostgresRow] = []
        rows.reserveCapacity(rowCount)
        for row in 0..<rowCount {
            var cells: [String?] = []
            cells.reserveCapacity(columnCount)
            for column in 0..<columnCount {
                if PQgetisnull(result, Int32(row), Int32(column)) == 1 {
                    cells.append(nil)
                } else {
                    cells.append(String(cString: PQgetvalue(result, Int32(row), Int32(column))))
                }
            }
            rows.append(PostgresRow(columns: columns, cells: cells))
        }
        let affected = Int(String(cString: PQcmdTuples(result))) ?? rowCount
        return PostgresResult(rows: rows, affectedRows: affected)
    }
}

/// Calls `body` with a NULL-terminated `const char **` view of `strings`.
func withCStringArray<R>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> R) -> R {
    withOptionalCStringArray(strings) { body($0!) }
}

/// Calls `body` with a `const char **` of `strings` (nil elements stay NULL), NULL-terminated.
func withOptionalCStringArray<R>(_ strings: [String?], _ body: (UnsafePointer<UnsafePointer<CChar>?>?) -> R) -> R {
    let copies: [UnsafeMutablePointer<CChar>?] = strings.map { $0.map { strdup($0)! } }
    defer { copies.forEach { free($0) } }
    var pointers: [UnsafePointer<CChar>?] = copies.map { $0.map { UnsafePointer($0) } }
    pointers.append(nil)
    return pointers.withUnsafeBufferPointer { body($0.baseAddress) }
}

/// How a connection sends parameterised statements (`FLEET_DATABASE_STATEMENTS`).
public enum StatementMode: String, Sendable, CaseIterable {
    /// Each statement prepared once per connection under a name (`fleet_N`) and executed by it:
    /// for connections that are sessions (to PostgreSQL, or a pooler in session mode).
    case prepared
    /// Each call parsed, planned and run in the unnamed statement, in one round trip: for a
    /// pooler in transaction mode (PgBouncer 1.18 cannot carry named statements from one server
    /// connection to the next).
    case unnamed
}

/// How a parameterised statement is planned.
public enum StatementPlanning: Sendable {
    /// Prepared once per connection; PostgreSQL may settle on a generic plan after five calls.
    /// For the hot statements, whose best plan does not depend on the values.
    case preparedOnce
    /// Planned on every call with the values at hand: for rare statements whose best plan does
    /// (an operator's filter matching ten rows or a million).
    case eachCall
}
