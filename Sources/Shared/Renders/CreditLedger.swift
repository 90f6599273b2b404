import FleetPostgres

/// The only code that writes `credits`, `credit_reservations` and `credit_ledger`
/// (docs/product.md, "Credits"). A credit moves with the render it pays for, in the statement
/// that changes the render (a compare-and-set on the render decides whether it moves at all), so
/// the settling entries are SQL for those statements to include; reserving and granting are
/// statements of their own. Every ledger entry has a key (`reserve:`, `consume:`, `release:`,
/// `refund:` and the render id; `grant:link:` and the token id), so each happens once however
/// often its statement runs.
enum CreditLedger {
    /// Locks the user's credits row, then reserves one credit for `render` if the balance less
    /// the open reservations allows one; false when it does not. Run inside the transaction
    /// that creates the render: the reservation is a new statement after the lock, so its count
    /// of open reservations sees every reservation committed before the lock was granted.
    static func reserve(user: String, render: String, on connection: PostgresConnection) async throws -> Bool {
        let balance = try await connection.query(
            "SELECT total_granted - total_consumed AS balance FROM credits WHERE user_id = $1 FOR UPDATE", [user]
        ).rows.first.map { try $0.int("balance") } ?? 0
        return try await connection.query("""
            WITH reserved AS (
                INSERT INTO credit_reservations (render_id, user_id)
                SELECT $1, $2 WHERE $3 - (SELECT count(*) FROM credit_reservations WHERE user_id = $2) >= 1
                RETURNING render_id
            ), ledger AS (
                INSERT INTO credit_ledger (key, user_id, render_id, entry, amount)
                SELECT 'reserve:' || render_id, $2, render_id, 'reserve', 1 FROM reserved
            )
            SELECT render_id FROM reserved
            """, [render, user, balance]).rows.count == 1
    }

    /// Grants `amount` credits to `user` once for `key` (a linked onboarding token's free
    /// credits); false when that key was granted before.
    static func grantOnce(key: String, user: String, amount: Int, on connection: PostgresConnection) async throws -> Bool {
        try await !connection.query("""
            WITH entry AS (
                INSERT INTO credit_ledger (key, user_id, entry, amount) VALUES ($1, $2, 'grant', $3)
                ON CONFLICT (key) DO NOTHING RETURNING amount
            )
            INSERT INTO credits (user_id, total_granted) SELECT $2, amount FROM entry
            ON CONFLICT (user_id) DO UPDATE SET total_granted = credits.total_granted + EXCLUDED.total_granted, updated_at = now()
            RETURNING total_granted
            """, [key, user, amount]).rows.isEmpty
    }

    /// CTEs (to follow `WITH …,`) consuming the reserved credit of each render in the CTE
    /// `renders` (column `id`): completed, so paid for.
    static func consumeSQL(of renders: String) -> String {
        """
        settled AS (
            DELETE FROM credit_reservations WHERE render_id IN (SELECT id FROM \(renders)) RETURNING user_id, render_id
        ), charged AS (
            UPDATE credits SET total_consumed = total_consumed + 1, updated_at = now()
            FROM settled WHERE credits.user_id = settled.user_id RETURNING credits.user_id
        ), consumed AS (
            INSERT INTO credit_ledger (key, user_id, render_id, entry, amount)
            SELECT 'consume:' || render_id, user_id, render_id, 'consume', 1 FROM settled
            ON CONFLICT (key) DO NOTHING RETURNING id
        )
        """
    }

    /// CTEs releasing the reservation of each render in the CTE `renders` (column `id`): ended
    /// without a result (failed, timed out, its token expired), so nothing is paid.
    static func releaseSQL(of renders: String) -> String {
        """
        released AS (
            DELETE FROM credit_reservations WHERE render_id IN (SELECT id FROM \(renders)) RETURNING user_id, render_id
        ), ledger AS (
            INSERT INTO credit_ledger (key, user_id, render_id, entry, amount)
            SELECT 'release:' || render_id, user_id, render_id, 'release', 1 FROM released
            ON CONFLICT (key) DO NOTHING RETURNING id
        )
        """
    }

    /// CTEs giving back the consumed credit of each render in the CTE `renders` (columns `id`,
    /// `user_id`, `charged`) when `condition` holds: a charged, consumed render, once. The CTE
    /// `credited` holds a row per credit given back.
    static func refundSQL(of renders: String, when condition: String) -> String {
        """
        refund AS (
            INSERT INTO credit_ledger (key, user_id, render_id, entry, amount)
            SELECT 'refund:' || id, user_id, id, 'refund', 1 FROM \(renders)
            WHERE \(condition) AND charged
              AND EXISTS (SELECT 1 FROM credit_ledger WHERE key = 'consume:' || \(renders).id)
            ON CONFLICT (key) DO NOTHING
            RETURNING user_id
        ), credited AS (
            UPDATE credits SET total_consumed = total_consumed - 1, updated_at = now()
            FROM refund WHERE credits.user_id = refund.user_id RETURNING credits.user_id
        )
        """
    }
}
