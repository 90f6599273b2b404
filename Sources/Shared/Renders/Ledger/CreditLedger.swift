import FleetPostgres

/// Every statement that moves a credit, each whole and named (docs/product.md, "Credits"): the
/// only SQL that writes `credits`, `credit_reservations` and `credit_ledger`. A credit moves with
/// the render it pays for, in the statement that changes the render: a compare-and-set on the
/// render decides whether it moves at all. Every ledger entry has a key (`reserve:`, `consume:`,
/// `release:`, `refund:` and the render id; `grant:link:` and the token id), so each happens once
/// however often its statement runs. A render an operator retried (`render.retry`) reserves and
/// releases again: those keys carry its retry count from the first retry on (`entryKey`); it is
/// consumed (and refunded) at most once, as only a failed render is retried. The sites that run
/// them are listed in docs/architecture.md ("Credit settlement").
package enum CreditLedger {
    /// The SQL of an `entry`'s ledger key for the render whose id and retry count are the
    /// expressions `render` and `retries`: `reserve:r1`, then `reserve:r1:1` after its first retry.
    package static func entryKey(_ entry: String, render: String, retries: String) -> String {
        "'\(entry):' || \(render) || CASE WHEN \(retries) = 0 THEN '' ELSE ':' || \(retries) END"
    }

    /// `$1` render, `$2` user, `$3` the user's balance read under the credits row's lock, `$4` the
    /// render's retry count: reserves one credit when the balance less the open reservations
    /// allows one (`render_id` returned).
    package static let reserveCredit = """
        WITH reserved AS (
            INSERT INTO credit_reservations (render_id, user_id)
            SELECT $1, $2 WHERE $3 - (SELECT count(*) FROM credit_reservations WHERE user_id = $2) >= 1
            RETURNING render_id
        ), ledger AS (
            INSERT INTO credit_ledger (key, user_id, render_id, entry, amount)
            SELECT \(entryKey("reserve", render: "render_id", retries: "$4::integer")), $2, render_id, 'reserve', 1 FROM reserved
        )
        SELECT render_id FROM reserved
        """

    /// `$1` key, `$2` user, `$3` amount: grants once per key (a linked onboarding token's free
    /// credits); no row when the key was granted before.
    package static let grantCreditsOnce = """
        WITH entry AS (
            INSERT INTO credit_ledger (key, user_id, entry, amount) VALUES ($1, $2, 'grant', $3)
            ON CONFLICT (key) DO NOTHING RETURNING amount
        )
        INSERT INTO credits (user_id, total_granted) SELECT $2, amount FROM entry
        ON CONFLICT (user_id) DO UPDATE SET total_granted = credits.total_granted + EXCLUDED.total_granted, updated_at = now()
        RETURNING total_granted
        """

    /// `$1` render, `$2` result path: processing → complete before its deadline, consuming the
    /// reserved credit (paid for). `id` when it completed.
    package static let completeRender = """
        WITH done AS (
            UPDATE renders SET status = 'complete', result_path = $2, updated_at = now()
            WHERE id = $1 AND status IN ('pending', 'processing') AND deadline_at > now()
            RETURNING id
        ), settled AS (
            DELETE FROM credit_reservations WHERE render_id IN (SELECT id FROM done) RETURNING user_id, render_id
        ), charged AS (
            UPDATE credits SET total_consumed = total_consumed + 1, updated_at = now()
            FROM settled WHERE credits.user_id = settled.user_id RETURNING credits.user_id
        ), consumed AS (
            INSERT INTO credit_ledger (key, user_id, render_id, entry, amount)
            SELECT 'consume:' || render_id, user_id, render_id, 'consume', 1 FROM settled
            ON CONFLICT (key) DO NOTHING RETURNING id
        )
        SELECT id FROM done
        """

    /// `$1` renders (text[]), `$2` error code, `$3` false to fail only those past their deadline,
    /// `$4` failure code (`RenderFailureCode`), `$5` its message: the open ones → failed, releasing
    /// their reservations (nothing paid). A row per render ended.
    package static let failRenders = """
        WITH done AS (
            UPDATE renders SET status = 'failed', error_code = $2, failure_code = $4, error_message = $5, updated_at = now()
            WHERE id = ANY($1::text[]) AND status IN ('pending', 'processing') AND ($3 OR deadline_at <= now())
            RETURNING id, provider, charged, provider_submission::text AS submission, retries
        ), released AS (
            DELETE FROM credit_reservations WHERE render_id IN (SELECT id FROM done) RETURNING user_id, render_id
        ), ledger AS (
            INSERT INTO credit_ledger (key, user_id, render_id, entry, amount)
            SELECT \(entryKey("release", render: "render_id", retries: "done.retries")), user_id, render_id, 'release', 1
            FROM released JOIN done ON done.id = released.render_id
            ON CONFLICT (key) DO NOTHING RETURNING id
        )
        SELECT id, provider, charged, submission FROM done
        """

    /// `$1` onboarding tokens (text[]), `$2` users (text[]): deletes their renders (an expired
    /// token's, a purged account's), releasing any reservation they held. A row per render
    /// deleted, with its storage owner.
    package static let deleteRenders = """
        WITH gone AS (
            DELETE FROM renders WHERE ephemeral_token_id = ANY($1::text[]) OR user_id = ANY($2::text[]) RETURNING id, owner_id, retries
        ), released AS (
            DELETE FROM credit_reservations WHERE render_id IN (SELECT id FROM gone) RETURNING user_id, render_id
        ), ledger AS (
            INSERT INTO credit_ledger (key, user_id, render_id, entry, amount)
            SELECT \(entryKey("release", render: "render_id", retries: "gone.retries")), user_id, render_id, 'release', 1
            FROM released JOIN gone ON gone.id = released.render_id
            ON CONFLICT (key) DO NOTHING RETURNING id
        )
        SELECT id, owner_id FROM gone
        """

    /// `$1` render, `$2` user, `$3` vote (`up`/`down`), `$4` category: records the feedback on a
    /// complete render; a thumbs-down gives back its consumed credit once. `found` (0 or 1),
    /// `refunded` (0 or 1), and the render's `status` when it was not complete.
    package static let recordFeedback = """
        WITH target AS (
            UPDATE renders SET feedback = $3, feedback_category = $4, updated_at = now()
            WHERE id = $1 AND user_id = $2 AND status = 'complete'
            RETURNING id, user_id, charged
        ), refund AS (
            INSERT INTO credit_ledger (key, user_id, render_id, entry, amount)
            SELECT 'refund:' || id, user_id, id, 'refund', 1 FROM target
            WHERE $3 = 'down' AND charged AND EXISTS (SELECT 1 FROM credit_ledger WHERE key = 'consume:' || target.id)
            ON CONFLICT (key) DO NOTHING
            RETURNING user_id
        ), credited AS (
            UPDATE credits SET total_consumed = total_consumed - 1, updated_at = now()
            FROM refund WHERE credits.user_id = refund.user_id RETURNING credits.user_id
        )
        SELECT (SELECT count(*) FROM target) AS found, (SELECT count(*) FROM credited) AS refunded,
               (SELECT status::text FROM renders WHERE id = $1 AND user_id = $2) AS status
        """

    /// Whether `user` (a placeholder such as `$2`) subscribes now, with Apple's billing grace in
    /// seconds at `grace`: trial or paid and not expired; cancelled until the period ends; paid
    /// within the grace. The one rule of what renders free: charging and the balance read use it.
    package static func subscribesNow(user: String, grace: String) -> String {
        """
        EXISTS (SELECT 1 FROM subscriptions WHERE user_id = \(user) AND (
            (status IN ('trial', 'subscribed', 'cancelled') AND expires_at > now())
            OR (status = 'subscribed' AND expires_at + make_interval(secs => \(grace)) > now())))
        """
    }

    /// `$1` user, `$2` billing grace in seconds: the balance the app shows. Granted and consumed
    /// (0 without a credits row), the open reservations, the latest subscription's status and end
    /// (the one ending last), and whether it counts as subscribed now (`subscribesNow`).
    package static let balance = """
        SELECT coalesce(c.total_granted, 0) AS granted, coalesce(c.total_consumed, 0) AS consumed,
               (SELECT count(*) FROM credit_reservations WHERE user_id = $1) AS reserved,
               s.status AS subscription_status, extract(epoch FROM s.expires_at) AS subscription_expires_at,
               \(subscribesNow(user: "$1", grace: "$2")) AS subscribed
        FROM (SELECT $1::text AS user_id) AS u
        LEFT JOIN credits AS c ON c.user_id = u.user_id
        LEFT JOIN LATERAL (
            SELECT status, expires_at FROM subscriptions WHERE user_id = u.user_id
            ORDER BY expires_at DESC NULLS LAST, updated_at DESC LIMIT 1
        ) AS s ON true
        """

    /// Locks the user's credits row, then reserves one credit for `render` (retried `retries`
    /// times) if the balance less the open reservations allows one; false when it does not. Run
    /// inside the transaction that creates (or retries) the render: the reservation is a new
    /// statement after the lock, so its count of open reservations sees every reservation
    /// committed before the lock was granted.
    package static func reserve(user: String, render: String, retries: Int = 0, on connection: PostgresConnection) async throws -> Bool {
        let balance = try await connection.query(
            "SELECT total_granted - total_consumed AS balance FROM credits WHERE user_id = $1 FOR UPDATE", [user]
        ).rows.first.map { try $0.int("balance") } ?? 0
        return try await connection.query(reserveCredit, [render, user, balance, retries]).rows.count == 1
    }

    /// Grants `amount` credits to `user` once for `key`; false when that key was granted before.
    package static func grantOnce(key: String, user: String, amount: Int, on connection: PostgresConnection) async throws -> Bool {
        try await !connection.query(grantCreditsOnce, [key, user, amount]).rows.isEmpty
    }
}
