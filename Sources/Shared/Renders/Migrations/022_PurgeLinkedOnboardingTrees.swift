import FleetPostgres
import FleetQueue

extension RenderMigrations {
    /// An account purged before `account.purge` covered the trees of its linked onboarding tokens
    /// left their photos behind: each such account is purged again (once, keyed). "Purged" is a
    /// completed `account.purge` still in `jobs`, after the account's last link and with no render
    /// of the account since (so an account the backend purged and kept using is left alone).
    /// Accounts whose purge job was already pruned are the operator's to send again
    /// (`docs/operations.md`, "Upgrading to version 22").
    static let purgeLinkedOnboardingTrees = Migration(version: 22, name: "purge linked onboarding trees", sql: JobTriggers.enqueueEach(
        kind: purgeKind, from: """
            SELECT jsonb_build_object('userId', linked.user_id) AS payload, 'purge:linked-trees:' || linked.user_id AS idempotency_key
            FROM (SELECT linked_user_id AS user_id, max(linked_at) AS linked_at FROM ephemeral_tokens
                  WHERE linked_user_id IS NOT NULL GROUP BY linked_user_id) AS linked
            CROSS JOIN LATERAL (SELECT \(JobTriggers.lastCompleted(kind: purgeKind, payloadField: "userId", equals: "linked.user_id")) AS at) AS purged
            WHERE purged.at > linked.linked_at
              AND NOT EXISTS (SELECT 1 FROM renders r WHERE r.user_id = linked.user_id AND r.created_at > purged.at)
            """))
}
