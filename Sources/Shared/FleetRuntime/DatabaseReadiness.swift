import FleetHTTP
import FleetPostgres
import Synchronization

/// `/readyz`'s database condition: `SELECT 1` through the process's own pool answers within
/// `timeout`. libpq calls cannot be cancelled, so a hung query is abandoned (it ends with
/// libpq's connect timeout) rather than awaited.
public struct DatabaseReadiness: ReadinessCheck {
    let pool: PostgresPool
    let timeout: Duration

    public init(pool: PostgresPool, timeout: Duration = .seconds(2)) {
        self.pool = pool
        self.timeout = timeout
    }

    public func unreadyReason() async -> String? {
        let (pool, timeout) = (pool, timeout)
        return await withCheckedContinuation { (continuation: CheckedContinuation<String?, Never>) in
            let pending = Mutex<CheckedContinuation<String?, Never>?>(continuation)
            let answer: @Sendable (String?) -> Void = { reason in pending.withLock { $0.take() }?.resume(returning: reason) }
            Task {
                do {
                    try await pool.query("SELECT 1")
                    answer(nil)
                } catch {
                    answer("database: \(error)")
                }
            }
            Task {
                try? await Task.sleep(for: timeout)
                answer("database: no answer to SELECT 1 within \(timeout)")
            }
        }
    }
}
