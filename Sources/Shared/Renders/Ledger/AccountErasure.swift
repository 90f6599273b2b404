import FleetPostgres
import FleetQueue
import FleetStorage
import Imaging

/// What an account's rows say about its files, for `account.purge` (`AccountRecords`): the
/// user's own tree and the trees of the onboarding tokens linked to it (linking leaves the
/// onboarding photos where they are, `EphemeralTokens.link`).
public struct AccountErasure: AccountRecords {
    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// 1. Deletes the user's renders (their paths and photo ids name the files), releasing an open
    ///    reservation once. A render still running then finds no row to complete and deletes the
    ///    result it wrote (`RenderHandler`); a queued one ends `gone`.
    /// 2. Locks the linked tokens: they name the trees, so a retry after a kill finds them all.
    ///    A token tree that another render names is left alone (its owner is someone else).
    /// 3. Refuses (retryable) while an image job still writes into one of the trees, so no photo
    ///    lands there after the purge; the job's retry runs after it.
    /// 4. Deletes the trees' files, then the linked tokens, in the transaction holding them.
    public func erase(_ user: StorageID, deletingTrees deleteTrees: @Sendable ([StorageID]) async throws -> Int) async throws -> Int {
        try await pool.withConnection { connection in
            try await connection.transaction { connection in
                _ = try await connection.query(CreditLedger.deleteRenders, [PostgresArray([String]()), PostgresArray([user.value])])
            }
            return try await connection.transaction { connection in
                let tokens = try await connection.query(Self.lockLinkedTokens, [user.value]).rows.map { try StorageID($0.string("id")) }
                let trees = [user] + tokens
                let writing = try await JobQueue.pendingJobs(matching: trees.flatMap { try JobMatch.imageJobs(writingInto: $0) }, in: connection)
                guard writing.isEmpty else {
                    throw JobError.retryable("image jobs \(writing.map { String($0.id) }.joined(separator: ", ")) still write into \(trees.map(\.value).joined(separator: ", ")); the purge runs after them")
                }
                let deleted = try await deleteTrees(trees)
                try await connection.query("DELETE FROM ephemeral_tokens WHERE linked_user_id = $1", [user.value])
                return deleted
            }
        }
    }

    /// `$1` user: the onboarding tokens linked to it whose tree no remaining render names, locked.
    static let lockLinkedTokens = """
        SELECT id FROM ephemeral_tokens t
        WHERE linked_user_id = $1 AND NOT EXISTS (SELECT 1 FROM renders r WHERE r.owner_id = t.id)
        ORDER BY id FOR UPDATE
        """
}
