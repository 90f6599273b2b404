import Foundation

/// A bounded set of connections shared by a process's tasks. Connections open lazily, a
/// broken one is dropped rather than reused, and a restarted server is simply reconnected to
/// (each new connection resolves `conninfo` again: after a failover, the new primary).
public actor PostgresPool {
    public let conninfo: String
    public let maxConnections: Int
    public let statements: StatementMode
    private let applicationName: String
    private var idle: [PostgresConnection] = []
    private var open = 0
    private var waiters: [CheckedContinuation<Void, Never>] = []

    /// `statements`: `.unnamed` when `conninfo` leads to a pooler in transaction mode.
    public init(conninfo: String, maxConnections: Int, applicationName: String = "wearbloom-fleet", statements: StatementMode = .prepared) {
        self.conninfo = conninfo
        self.maxConnections = max(1, maxConnections)
        self.applicationName = applicationName
        self.statements = statements
    }

    /// Lends a connection to `body` and takes it back afterwards.
    public nonisolated func withConnection<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        let connection = try await acquire()
        do {
            let value = try await body(connection)
            await release(connection)
            return value
        } catch {
            await release(connection)
            throw error
        }
    }

    /// Like `withConnection`, but a transient failure (lost link, server restarting) runs
    /// `body` again on a fresh connection for up to a minute. Only for idempotent work.
    public nonisolated func withRetry<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(60)
        var delay = Duration.milliseconds(50)
        while true {
            do {
                return try await withConnection(body)
            } catch let error as PostgresError where error.isTransient && clock.now + delay < deadline {
                try await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(2))
            }
        }
    }

    /// Sends `payload` on `topic` in a transaction of its own whose commit does not wait for
    /// the disk. PostgreSQL queues notifications in commit order under one database-wide lock,
    /// held until the notifying transaction's commit is flushed: a notify inside a durable write
    /// makes all such writes flush one after another instead of together. A notification is a
    /// hint (its listeners also poll) that a crash loses anyway, so this one needs no flush.
    public nonisolated func notify<Payload>(_ topic: NotificationTopic<Payload>, _ payload: Payload) async throws {
        try await notify(topic, [payload])
    }

    /// Sends each of `payloads` on `topic`, in one such transaction.
    public nonisolated func notify<Payload>(_ topic: NotificationTopic<Payload>, _ payloads: [Payload]) async throws {
        guard !payloads.isEmpty else { return }
        try await query(Self.notifyWithoutFlushWaitSQL, [topic.name, PostgresArray(payloads.map(topic.encode))])
    }

    /// Sends each of `$2` (text[]) on channel `$1`; its transaction's commit does not wait for the disk.
    static let notifyWithoutFlushWaitSQL = """
        SELECT count(pg_notify($1, payload)) FROM unnest($2::text[]) AS payload,
            (SELECT set_config('synchronous_commit', 'off', true)) AS no_flush_wait
        """

    private func acquire() async throws -> PostgresConnection {
        while true {
            if let connection = idle.popLast() {
                if connection.isAlive() { return connection }
                open -= 1
                continue
            }
            if open < maxConnections {
                open += 1
                do {
                    return try await PostgresConnection.connect(conninfo, applicationName: applicationName, statements: statements)
                } catch {
                    open -= 1
                    wakeOne()
                    throw error
                }
            }
            await withCheckedContinuation { waiters.append($0) }
        }
    }

    private func release(_ connection: PostgresConnection) {
        if connection.isBroken {
            open -= 1
        } else {
            idle.append(connection)
        }
        wakeOne()
    }

    private func wakeOne() {
        if !waiters.isEmpty { waiters.removeFirst().resume() }
    }
}
