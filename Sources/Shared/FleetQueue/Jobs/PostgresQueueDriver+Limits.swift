import FleetPostgres
import Synchronization
import Foundation

/// The claim under fleet-wide limits, and the limits' rows (`docs/queue.md`, "Limits").
///
/// Why a transaction and not one statement: a statement counts running jobs in the snapshot it
/// started with, so two claimers counting at once would each see room for the same last slot.
/// Every limited claim first locks the rules' rows (`FOR UPDATE`, in key order); the next
/// statements take a new snapshot, in which every claim that held the lock before has committed.
/// Claims of kinds without limits never take that lock.
extension PostgresQueueDriver {
    func claimWithinLimits(_ slots: [JobKind: Int], _ request: ClaimRequest) async throws -> ClaimResult {
        try await executor.withConnection { connection in
            if executor.joinsCallerTransaction { return try await claimWithinLimits(slots, request, on: connection, ownsTransaction: false) }
            return try await connection.transaction { try await claimWithinLimits(slots, request, on: $0, ownsTransaction: true) }
        }
    }

    private func claimWithinLimits(
        _ slots: [JobKind: Int], _ request: ClaimRequest, on connection: PostgresConnection, ownsTransaction: Bool
    ) async throws -> ClaimResult {
        // As for the claim without limits, the commit need not wait for the disk (a claim lost in a
        // crash is claimed again; a start lost from `limit_starts` only undercounts one window).
        // Waiting for it made every limited claim queue behind the disk: render overhead at 500
        // in flight went from 55 to 193 ms p50 (docs/benchmarks.md). Not in a caller's transaction.
        let noFlushWait = ownsTransaction ? "SET LOCAL synchronous_commit = off; " : ""
        let rules = try await connection.query(
            noFlushWait + "SELECT \(Self.limitColumns) FROM queue_limits ORDER BY key FOR UPDATE"
        ).rows.map(ConcurrencyLimit.init(row:))
        guard !rules.isEmpty else { return ClaimResult(jobs: try await claim(slots, request, on: connection) ?? []) }

        let running = try await Self.runningPerKey(on: connection)
        var startAges: [String: [Duration]] = [:]
        if let longest = rules.map(\.rateWindow).max() {
            try await connection.query("DELETE FROM limit_starts WHERE started_at < now() - make_interval(secs => $1)", [longest.seconds])
            startAges = try await Self.startAgesPerKey(on: connection)
        }
        var ledger = LimitLedger(rules: rules, running: running, startAges: startAges)
        let full = ledger.fullKeys()

        let wanted = slots.sorted { $0.key < $1.key }
        let kinds = PostgresArray(wanted.map(\.key.rawValue))
        // Jobs of full keys are left out here, so the ones behind them are seen; a few more
        // candidates than slots, because taking one may fill a key the next one also carries.
        let candidates = try await connection.query("""
            SELECT j.id, j.kind, array_to_string(j.limit_keys, ' ') AS keys
            FROM unnest($1::text[], $2::integer[]) AS wanted(kind, slots)
            CROSS JOIN LATERAL (
                SELECT id, kind, limit_keys, priority, run_at FROM jobs
                WHERE state = 'available' AND kind = wanted.kind AND run_at <= now()
                  AND ($3::text[] IS NULL OR queue = ANY($3::text[]))
                  AND \(Self.queueNotPaused(pausedQueues: "ARRAY(SELECT name FROM queue_pauses WHERE scope = 'queue')"))
                  AND \(Self.notFull("limit_keys", keys: "$4", prefixes: "$5"))
                ORDER BY priority, run_at, id
                LIMIT wanted.slots * 2 + 16
                FOR UPDATE SKIP LOCKED
            ) AS j
            WHERE NOT EXISTS (SELECT 1 FROM queue_pauses WHERE scope = 'kind' AND name = wanted.kind)
            ORDER BY j.priority, j.run_at, j.id
            """, [kinds, PostgresArray(wanted.map(\.value)), request.queues.map { PostgresArray($0) },
                  PostgresArray(full.keys), PostgresArray(full.prefixes)]).rows

        var left = slots
        var admitted: [Int64] = []
        var heldBack: Set<JobKind> = []
        for row in candidates {
            let kind = JobKind(rawValue: try row.string("kind"))
            guard left[kind, default: 0] > 0 else { continue }
            let keys = (row["keys"] ?? "").split(separator: " ").map(String.init)
            if ledger.admit(keys) {
                admitted.append(try row.int64("id"))
                left[kind, default: 0] -= 1
            } else {
                heldBack.insert(kind)
            }
        }
        if !full.keys.isEmpty || !full.prefixes.isEmpty {
            // Due jobs the candidate query left out wait for a slot too.
            for row in try await connection.query("""
                SELECT wanted.kind FROM unnest($1::text[]) AS wanted(kind)
                WHERE EXISTS (
                    SELECT 1 FROM jobs WHERE state = 'available' AND kind = wanted.kind AND run_at <= now()
                      AND NOT \(Self.notFull("limit_keys", keys: "$2", prefixes: "$3")))
                """, [kinds, PostgresArray(full.keys), PostgresArray(full.prefixes)]).rows {
                heldBack.insert(JobKind(rawValue: try row.string("kind")))
            }
        }
        guard !admitted.isEmpty else { return ClaimResult(jobs: [], heldBack: heldBack, limitsExist: true) }

        let jobs = try await connection.query("""
            UPDATE jobs SET state = 'running', attempt = attempt + 1, lease_owner = $2,
                lease_expires_at = now() + make_interval(secs => $3), started_at = now()
            WHERE id = ANY($1::bigint[]) AND state = 'available'
            RETURNING id, kind, queue, priority, attempt, max_attempts, payload, extract(epoch FROM created_at) AS created_at, trace_parent
            """, [PostgresArray(admitted), request.owner, request.lease.seconds]).rows.map(ClaimedJob.init(row:))
        let starts = ledger.startsInBatch.flatMap { key, count in Array(repeating: key, count: count) }
        if !starts.isEmpty {
            try await connection.query("INSERT INTO limit_starts (key) SELECT unnest($1::text[])", [PostgresArray(starts)])
        }
        return ClaimResult(jobs: jobs, heldBack: heldBack, limitsExist: true)
    }

    /// SQL: the job's keys include none of the full keys and none under a prefix that allows none.
    private static func notFull(_ column: String, keys: String, prefixes: String) -> String {
        """
        NOT (coalesce(\(column), '{}') && \(keys)::text[])
                  AND NOT EXISTS (SELECT 1 FROM unnest(\(column)) AS k, unnest(\(prefixes)::text[]) AS p WHERE starts_with(k, p))
        """
    }

    /// Creates or replaces the rule for `limit.key`; with `keepingExisting`, only creates it.
    func limitSet(_ limit: ConcurrencyLimit, by actor: String, keepingExisting: Bool) async throws {
        let limit = try limit.validated()
        let onConflict = keepingExisting ? "DO NOTHING" : """
            DO UPDATE SET max_running = EXCLUDED.max_running, rate = EXCLUDED.rate,
                rate_window_seconds = EXCLUDED.rate_window_seconds, updated_by = EXCLUDED.updated_by, updated_at = now(),
                throttled_rate = NULL, throttled_from = NULL, throttled_at = NULL
            """
        try await executor.query("""
            INSERT INTO queue_limits (key, max_running, rate, rate_window_seconds, updated_by) VALUES ($1, $2, $3, $4, $5)
            ON CONFLICT (key) \(onConflict)
            """, [limit.key, limit.maxRunning, limit.rate, limit.rateWindow.seconds, actor])
        // Workers holding jobs back claim again at once (a raised limit).
        try await executor.announce(.limits, on: QueueChannel.control)
    }

    static let limitColumns = "key, max_running, rate, rate_window_seconds, throttled_rate, throttled_from, extract(epoch FROM now() - throttled_at) AS throttled_age"

    /// The limited service answered "too many" (429): halves the key's rate in force for a while
    /// (`ConcurrencyLimit.Throttle`); the rule as it now is, nil when no rule names the key.
    func limitThrottle(key: String) async throws -> ConcurrencyLimit? {
        guard let row = try await executor.query("""
            SELECT \(Self.limitColumns), (SELECT count(*) FROM limit_starts s WHERE s.key = q.key
                AND s.started_at > now() - make_interval(secs => q.rate_window_seconds)) AS starts
            FROM queue_limits q WHERE key = $1
            """, [key]).rows.first else { return nil }
        let rule = try ConcurrencyLimit(row: row)
        // What was in force: the rate, else the starts the window saw (a rule of running jobs only).
        let starts = try row.int("starts")
        let inForce = rule.effectiveRate ?? max(2, starts)
        let lowered = max(1, inForce / 2)
        // A throttle still in force keeps its starting point; a new one starts from what was in force.
        let from = rule.throttle.flatMap { $0.current == nil ? nil : $0.from } ?? rule.rate ?? inForce
        // One halving per burst: the 429s of requests already in flight say the same thing.
        let updated = try await executor.query("""
            UPDATE queue_limits SET throttled_rate = $2, throttled_from = $3, throttled_at = now()
            WHERE key = $1 AND (throttled_at IS NULL OR throttled_at < now() - make_interval(secs => $4))
            RETURNING \(Self.limitColumns)
            """, [key, lowered, from, ConcurrencyLimit.Throttle.minimumInterval.seconds]).rows.first
        return try updated.map(ConcurrencyLimit.init(row:)) ?? rule
    }

    /// Removes a rule; false if there was none.
    func limitRemove(key: String) async throws -> Bool {
        let removed = try await executor.query("DELETE FROM queue_limits WHERE key = $1 RETURNING key", [key]).rows.count == 1
        if removed { try await executor.announce(.limits, on: QueueChannel.control) }
        return removed
    }

    func limitList() async throws -> [ConcurrencyLimit] {
        try await executor.query("SELECT \(Self.limitColumns) FROM queue_limits ORDER BY key")
            .rows.map(ConcurrencyLimit.init(row:))
    }

    /// Per rule: running jobs and starts within its window, per key it limits (prefix rules: keys in use).
    func limitUsage() async throws -> [LimitUsage] {
        let rules = try await limitList()
        guard !rules.isEmpty else { return [] }
        var waiting: [String: Int] = [:]
        for row in try await executor.query("""
            SELECT k AS key, count(*) AS n FROM jobs CROSS JOIN LATERAL unnest(limit_keys) AS k
            WHERE limit_keys IS NOT NULL AND state = 'available' AND run_at <= now() AND k = ANY($1::text[])
            GROUP BY k
            """, [PostgresArray(rules.filter { !$0.isPrefix }.map(\.key))]).rows {
            waiting[try row.string("key")] = try row.int("n")
        }
        let running = try await Self.runningPerKey(on: executor)
        let startAges = try await Self.startAgesPerKey(on: executor)
        let ledger = LimitLedger(rules: rules, running: running, startAges: startAges)
        var usage: [LimitUsage] = []
        for rule in rules {
            let keys = rule.isPrefix
                ? Set(running.keys).union(startAges.keys).filter { ledger.rule(for: $0) == rule }.sorted()
                : [rule.key]
            for key in keys {
                usage.append(LimitUsage(
                    rule: rule.key, key: key, running: running[key, default: 0],
                    startedInWindow: startAges[key, default: []].count { $0 < rule.rateWindow }, waiting: waiting[key, default: 0]))
            }
        }
        return usage
    }

    /// SQL: the `queue_limits` row's rule applies to `keyExpression`.
    private static func ruleCovers(_ keyExpression: String) -> String {
        "key = \(keyExpression) OR (right(key, 1) = '*' AND starts_with(\(keyExpression), left(key, -1)))"
    }

    /// One key's rule and use, its waiting jobs counted among the due jobs of `kind` (admission control).
    func limitLoad(key: String, kind: JobKind) async throws -> LimitLoad {
        // One statement (admission control asks on every render request): the key's own rule,
        // else the longest prefix rule over it, and the key's use, counted only under a rule.
        // `kind`'s jobs ahead are those due and those waiting for the jobs they run after (a
        // render waiting for its photos takes a slot once they are made, within seconds): one
        // bitmap scan of `jobs_claim_idx` and `jobs_waiting_idx` by kind. The kind's running
        // jobs by id, from `jobs_lease_idx` (as many as the rule lets run).
        let row = try await executor.query("""
            WITH rule AS (
                SELECT \(Self.limitColumns) FROM queue_limits WHERE \(Self.ruleCovers("$1"))
                ORDER BY key = $1 DESC, length(key) DESC LIMIT 1
            )
            SELECT rule.*,
                (SELECT count(*) FROM jobs WHERE rule.key IS NOT NULL
                    AND state = 'running' AND limit_keys IS NOT NULL AND $1 = ANY(limit_keys)) AS running_now,
                (SELECT count(*) FROM jobs WHERE rule.key IS NOT NULL AND kind = $2 AND $1 = ANY(limit_keys)
                    AND (state = 'waiting' OR (state = 'available' AND run_at <= now()))) AS waiting_now,
                (SELECT count(*) FROM limit_starts WHERE rule.key IS NOT NULL AND key = $1
                    AND started_at > now() - make_interval(secs => coalesce(rule.rate_window_seconds, 60))) AS started_now,
                (SELECT coalesce(string_agg(id::text, ','), '') FROM jobs WHERE rule.key IS NOT NULL
                    AND state = 'running' AND kind = $2 AND $1 = ANY(limit_keys)) AS running_ids
            FROM (SELECT 1) AS one LEFT JOIN rule ON true
            """, [key, kind.rawValue]).rows[0]
        return LimitLoad(rule: row["key"] == nil ? nil : try ConcurrencyLimit(row: row), running: try row.int("running_now"),
                         waiting: try row.int("waiting_now"), startedInWindow: try row.int("started_now"),
                         runningJobIDs: try row.string("running_ids").split(separator: ",").compactMap { Int64($0) })
    }
}

extension PostgresQueueDriver {
    /// Per job key: the running jobs carrying it (what the claim and `limitUsage` count).
    fileprivate static func runningPerKey(on executor: any PostgresExecutor) async throws -> [String: Int] {
        var running: [String: Int] = [:]
        for row in try await executor.query("""
            SELECT k AS key, count(*) AS n FROM jobs CROSS JOIN LATERAL unnest(limit_keys) AS k
            WHERE state = 'running' AND limit_keys IS NOT NULL GROUP BY k
            """).rows {
            running[try row.string("key")] = try row.int("n")
        }
        return running
    }

    /// Per job key: the ages of its logged starts.
    fileprivate static func startAgesPerKey(on executor: any PostgresExecutor) async throws -> [String: [Duration]] {
        var ages: [String: [Duration]] = [:]
        for row in try await executor.query("SELECT key, extract(epoch FROM now() - started_at) AS age FROM limit_starts").rows {
            ages[try row.string("key"), default: []].append(.seconds(try row.double("age")))
        }
        return ages
    }
}

extension ConcurrencyLimit {
    init(row: PostgresRow) throws {
        var throttle: Throttle?
        if let rate = row["throttled_rate"].flatMap({ Int($0) }), let from = row["throttled_from"].flatMap({ Int($0) }) {
            throttle = Throttle(rate: rate, from: from, age: .seconds(try row.double("throttled_age")))
        }
        self.init(key: try row.string("key"), maxRunning: row["max_running"].flatMap { Int($0) }, rate: row["rate"].flatMap { Int($0) },
                  rateWindow: .seconds(try row.double("rate_window_seconds")), throttle: throttle)
    }
}

extension ClaimedJob {
    init(row: PostgresRow) throws {
        self.init(
            id: try row.int64("id"), kind: JobKind(rawValue: try row.string("kind")), queue: try row.string("queue"),
            priority: try row.int("priority"), attempt: try row.int("attempt"), maxAttempts: try row.int("max_attempts"),
            payload: try row.string("payload"), createdAt: try row.date("created_at"), traceParent: row["trace_parent"])
    }
}

/// Whether a driver's last claim of limited kinds found a limit rule, shared by its copies.
final class LimitRulesSeen: Sendable {
    let value = Atomic<Bool>(true)
}
