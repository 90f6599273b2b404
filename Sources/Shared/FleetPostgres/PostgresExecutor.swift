/// Where statements run: a pool (each call borrows a connection) or a connection a caller holds,
/// usually inside its open transaction, so the statements join the caller's unit of work (River's
/// driver executor: a pool or a transaction behind one interface).
public protocol PostgresExecutor: Sendable {
    /// Lends a connection to `body`.
    func withConnection<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T
    /// For idempotent work: on a pool, a lost link runs `body` again on a fresh connection; on a
    /// caller's connection nothing can be re-run (its transaction is gone with the link).
    func withRetry<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T
    /// True when the statements join a transaction the caller commits: settings local to a
    /// transaction (`set_config(…, true)`) would then leak into the caller's other writes.
    var joinsCallerTransaction: Bool { get }
}

extension PostgresExecutor {
    /// A single statement.
    @discardableResult
    public func query(_ sql: String, _ parameters: [(any PostgresEncodable)?] = [], planning: StatementPlanning = .preparedOnce) async throws -> PostgresResult {
        try await withConnection { try await $0.query(sql, parameters, planning: planning) }
    }

    /// Sends `payload` on `topic` in a statement of its own, delivered when the executor's
    /// transaction commits. Outside a caller's transaction the statement is its own transaction,
    /// whose commit does not wait for the disk (`PostgresPool.notify`: a notification is a hint);
    /// inside one, that setting would cover the caller's writes too.
    public func announce<Payload>(_ payload: Payload, on topic: NotificationTopic<Payload>) async throws {
        if joinsCallerTransaction {
            try await query("SELECT pg_notify($1, $2)", [topic.name, topic.encode(payload)])
        } else {
            try await query(PostgresPool.notifyWithoutFlushWaitSQL, [topic.name, PostgresArray([topic.encode(payload)])])
        }
    }

    /// Runs `body` in a transaction: the caller's when the executor joins one (its caller then
    /// decides what a conflict means), otherwise one of its own on a lent connection, run again,
    /// up to `attempts` runs in all, when the server rolled it back to settle a conflict with
    /// another (`SQLState.isConflict`: a deadlock's victim, a serialization failure). The server
    /// undid it whole, so another run starts from nothing. For transactions that lock rows others
    /// lock in their own order: an enqueue locking the jobs it runs after while a worker's
    /// outcome batch ends them, a render locking its image jobs.
    public func transactionRetryingConflicts<T: Sendable>(
        attempts: Int = 3, _ body: (PostgresConnection) async throws -> T
    ) async throws -> T {
        if joinsCallerTransaction { return try await withConnection(body) }
        var run = 1
        while true {
            do {
                return try await withConnection { try await $0.transaction(body) }
            } catch PostgresError.server(let state, _, _) where state.isConflict && run < attempts {
                run += 1
            }
        }
    }
}

extension PostgresPool: PostgresExecutor {
    public nonisolated var joinsCallerTransaction: Bool { false }
}

extension PostgresConnection: PostgresExecutor {
    public func withConnection<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        try await body(self)
    }

    public func withRetry<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        try await body(self)
    }

    public var joinsCallerTransaction: Bool { true }
}
