import DispatcherProtocol
import FleetPostgres
import FleetQueue
import Foundation
import Logging
import Renders

/// What the console reads and does. Every action and every read an op already answers goes
/// through that op (`perform`), with the caller's role checked as the socket checks it and the
/// caller set for the audit trail: the console adds no second way to change the queue. The
/// reads no op answers (the overview, which refreshes every 2 s and must not count the whole
/// table as `stats` does; dead-job groups; the schedule's slots; renders across users) are the
/// statements below.
struct ConsoleFleet: Sendable {
    let pool: PostgresPool
    let queue: JobQueue
    let control: JobControl
    let schedule: ScheduleSettings
    /// A worker whose heartbeat is older than this is silent (as `stats` counts live workers).
    let liveWorkerWithin: Duration

    let jobsList: JobsListOperation
    let jobGet: JobGetOperation
    let jobRetry: JobRetryOperation
    let jobsRetry: JobsRetryOperation
    let jobDiscard: JobDiscardOperation
    let jobsDiscard: JobsDiscardOperation
    let cancel: CancelOperation
    let pause: QueuePauseOperation
    let resume: QueueResumeOperation
    let audit: AuditListOperation

    init(pool: PostgresPool, schedule: ScheduleSettings, liveWorkerWithin: Duration, logger: Logger) {
        let queue = JobQueue(driver: PostgresQueueDriver(executor: pool), knownKinds: FleetKinds.all)
        let control = JobControl(driver: queue.driver, logger: logger)
        self.pool = pool
        self.queue = queue
        self.control = control
        self.schedule = schedule
        self.liveWorkerWithin = liveWorkerWithin
        jobsList = JobsListOperation(control: control)
        jobGet = JobGetOperation(queue: queue)
        jobRetry = JobRetryOperation(queue: queue, control: control)
        jobsRetry = JobsRetryOperation(control: control)
        jobDiscard = JobDiscardOperation(control: control)
        jobsDiscard = JobsDiscardOperation(control: control)
        cancel = CancelOperation(queue: queue)
        pause = QueuePauseOperation(control: control, knownKinds: queue.knownKinds)
        resume = QueueResumeOperation(control: control)
        audit = AuditListOperation(control: control)
    }

    /// Runs an op as `caller`: refused (`FORBIDDEN`) outside the op's roles, exactly as on the socket.
    func perform<Operation: DispatcherOperation>(_ operation: Operation, _ request: Operation.Request, as caller: Caller) async throws
        -> Operation.Request.Result
    {
        guard case .roles(let roles) = operation.access, roles.contains(caller.role) else {
            throw DispatcherError(.forbidden, "the token '\(caller.name)' (\(caller.role.rawValue)) may not use \(Operation.Request.op)")
        }
        do {
            return try await Caller.$current.withValue(caller) { try await operation.run(request) }
        } catch {
            throw DispatcherError(mapping: error)
        }
    }

    /// `cancel` is a backend's op and records nothing; from the console it is an operator's
    /// action like the others, so it lands in the audit trail.
    func cancelJob(_ jobId: Int64, as caller: Caller) async throws -> CancelRequest.Result {
        guard caller.role == .operate else { throw DispatcherError(.forbidden, "the token '\(caller.name)' may not cancel jobs") }
        let result = try await perform(cancel, CancelRequest(jobId: jobId), as: caller)
        if result.outcome != .alreadyFinished {
            try await control.record(actor: caller.name, action: "job.cancel", target: ["jobId": jobId], affected: 1)
        }
        return result
    }

    // MARK: Reads no op answers

    struct DeadGroup: Sendable {
        let kind: String
        let errorCode: String?
        let count: Int
        let firstSeen: Date
        let lastSeen: Date
        let sampleJobId: Int64
        let samplePayload: String
    }

    /// Dead jobs grouped by kind and latest error code, largest first; a group's sample is its
    /// newest job. An index-only scan of the dead jobs' index by kind and code (`jobs_dead_groups_idx`).
    func deadGroups() async throws -> [DeadGroup] {
        try await pool.query("""
            SELECT g.kind, g.code, g.n, extract(epoch FROM g.first_seen) AS first_seen, extract(epoch FROM g.last_seen) AS last_seen,
                   g.sample_id, j.payload::text AS payload
            FROM (SELECT kind, last_error_code AS code, count(*) AS n, min(finished_at) AS first_seen,
                         max(finished_at) AS last_seen, max(id) AS sample_id
                  FROM jobs WHERE state = 'dead' GROUP BY 1, 2 ORDER BY n DESC, kind LIMIT 200) g
            JOIN jobs j ON j.id = g.sample_id
            ORDER BY g.n DESC, g.kind, g.code
            """).rows.map { row in
            DeadGroup(kind: try row.string("kind"), errorCode: row["code"], count: try row.int("n"), firstSeen: try row.date("first_seen"),
                      lastSeen: try row.date("last_seen"), sampleJobId: try row.int64("sample_id"), samplePayload: try row.string("payload"))
        }
    }

    /// How many of the newest jobs (by id) the overview reads for what finished in the last hour.
    static let recentJobsWindow = 30_000

    struct KindLine: Decodable, Sendable {
        let kind: String
        let due: Int
        let scheduled: Int
        let retrying: Int
        let running: Int
        let lagSeconds: Double?
        let completed: Int
        let dead: Int
        let paused: Bool
    }

    struct Overview: Sendable {
        let kinds: [KindLine]
        /// Completed and dead per minute over the last hour, oldest minute first (60 entries).
        let minutes: [(completed: Int, failed: Int)]
    }

    /// The overview's numbers in one statement whose cost follows the queue, not the table:
    /// due, scheduled and lag come from the claim's partial index (kind and run_at, no heap once
    /// vacuumed), retrying from the retried jobs' own (`jobs_retrying_idx`), running from the
    /// lease index: exact. What finished in the last hour
    /// (per kind, and per minute for the chart) comes from the newest `recentJobsWindow` jobs by
    /// id: exact while fewer jobs than that were created in the last hour, an undercount above.
    /// (`stats` counts the whole table: a full scan a refresh every 2 s must not cost.)
    func overview() async throws -> Overview {
        let row = try await pool.query("""
            WITH recent AS (
                SELECT kind, state, finished_at FROM jobs ORDER BY id DESC LIMIT $1
            ), finished AS (
                SELECT kind, state, floor(extract(epoch FROM now() - finished_at) / 60)::int AS minutes_ago
                FROM recent WHERE state IN ('completed', 'dead') AND finished_at > now() - interval '1 hour'
            ), queued AS (
                SELECT kind, count(*) FILTER (WHERE run_at <= now()) AS due, count(*) FILTER (WHERE run_at > now()) AS scheduled,
                       extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now())) AS lag
                FROM jobs WHERE state = 'available' GROUP BY kind
            ), retrying AS (
                SELECT kind, count(*) AS retrying FROM jobs WHERE state = 'available' AND attempt > 0 GROUP BY kind
            ), running AS (
                SELECT kind, count(*) AS running FROM jobs WHERE state = 'running' GROUP BY kind
            ), ended AS (
                SELECT kind, count(*) FILTER (WHERE state = 'completed') AS completed, count(*) FILTER (WHERE state = 'dead') AS dead
                FROM finished GROUP BY kind
            ), paused AS (
                SELECT name AS kind FROM queue_pauses WHERE scope = 'kind'
            )
            SELECT
                (SELECT coalesce(json_agg(json_build_object(
                        'kind', k.kind, 'due', coalesce(q.due, 0), 'scheduled', coalesce(q.scheduled, 0),
                        'retrying', coalesce(rt.retrying, 0), 'running', coalesce(r.running, 0), 'lagSeconds', q.lag,
                        'completed', coalesce(e.completed, 0), 'dead', coalesce(e.dead, 0), 'paused', p.kind IS NOT NULL)
                        ORDER BY k.kind), '[]')
                 FROM (SELECT kind FROM queued UNION SELECT kind FROM running UNION SELECT kind FROM ended UNION SELECT kind FROM paused) k
                 LEFT JOIN queued q USING (kind) LEFT JOIN retrying rt USING (kind) LEFT JOIN running r USING (kind)
                 LEFT JOIN ended e USING (kind)
                 LEFT JOIN paused p USING (kind))::text AS kinds,
                (SELECT coalesce(json_agg(json_build_array(minutes_ago, completed, failed)), '[]')
                 FROM (SELECT minutes_ago, count(*) FILTER (WHERE state = 'completed') AS completed,
                              count(*) FILTER (WHERE state = 'dead') AS failed
                       FROM finished GROUP BY 1) m)::text AS minutes
            """, [Self.recentJobsWindow]).rows[0]
        let kinds = try JSONDecoder().decode([KindLine].self, from: Data(try row.string("kinds").utf8))
        var minutes = Array(repeating: (completed: 0, failed: 0), count: 60)
        for minute in try JSONDecoder().decode([[Int]].self, from: Data(try row.string("minutes").utf8)) where (0..<60).contains(minute[0]) {
            minutes[59 - minute[0]] = (minute[1], minute[2])
        }
        return Overview(kinds: kinds, minutes: minutes)
    }

    /// Every live-or-silent worker not stopped within the last day: the ones whose heartbeat is
    /// older than `liveWorkerWithin` are silent (died, or hung).
    func workers() async throws -> [(worker: LiveWorker, silent: Bool)] {
        let now = Date()
        return try await queue.liveWorkers(heartbeatWithin: .seconds(86_400)).map { worker in
            (worker, now.timeIntervalSince(worker.lastHeartbeatAt) > Double(liveWorkerWithin.components.seconds))
        }
    }

    struct SlotRun: Sendable {
        let slotAt: Date
        let claimedBy: String
        let jobId: Int64?
        let error: String?
    }

    /// Each schedule entry's latest slot run (`schedule_slots` keeps a day of them).
    func lastSlots() async throws -> [String: SlotRun] {
        var runs: [String: SlotRun] = [:]
        for row in try await pool.query("""
            SELECT DISTINCT ON (entry) entry, extract(epoch FROM slot_at) AS slot_at, claimed_by, job_id, error
            FROM schedule_slots ORDER BY entry, slot_at DESC
            """).rows {
            runs[try row.string("entry")] = SlotRun(
                slotAt: try row.date("slot_at"), claimedBy: try row.string("claimed_by"), jobId: row["job_id"].flatMap { Int64($0) }, error: row["error"])
        }
        return runs
    }

    struct RenderFilter: Sendable {
        var status: String?
        var provider: String?
        var userId: String?
    }

    struct RenderLine: Sendable {
        let id: String
        let userId: String?
        let provider: String
        let status: String
        let category: String
        let charged: Bool
        let errorCode: String?
        let jobId: Int64?
        let createdAt: Date
        let providerSubmission: String?
        let ledger: [(entry: String, amount: Int, at: Date)]
    }

    /// The newest renders matching the filter (at most 50), each with its credit ledger entries
    /// (found through the ledger's index on its user: only a user's renders have credits) and
    /// its provider submission.
    func renders(_ filter: RenderFilter) async throws -> [RenderLine] {
        let rows = try await pool.query("""
            SELECT r.id, r.user_id, r.provider, r.status::text AS status, r.category, r.charged, r.error_code, r.job_id,
                   extract(epoch FROM r.created_at) AS created_at, r.provider_submission::text AS submission,
                   (SELECT coalesce(json_agg(json_build_object('entry', l.entry, 'amount', l.amount, 'at', extract(epoch FROM l.created_at))
                                             ORDER BY l.id), '[]')::text
                    FROM credit_ledger l WHERE l.user_id = r.user_id AND l.render_id = r.id) AS ledger
            FROM renders r
            WHERE ($1::text IS NULL OR r.status::text = $1) AND ($2::text IS NULL OR r.provider = $2) AND ($3::text IS NULL OR r.user_id = $3)
            ORDER BY r.created_at DESC LIMIT 50
            """, [filter.status, filter.provider, filter.userId], planning: .eachCall).rows
        struct LedgerEntry: Decodable { let entry: String; let amount: Int; let at: Double }
        return try rows.map { row in
            let ledger = try JSONDecoder().decode([LedgerEntry].self, from: Data((row["ledger"] ?? "[]").utf8))
            return RenderLine(
                id: try row.string("id"), userId: row["user_id"], provider: try row.string("provider"), status: try row.string("status"),
                category: try row.string("category"), charged: try row.bool("charged"), errorCode: row["error_code"],
                jobId: row["job_id"].flatMap { Int64($0) }, createdAt: try row.date("created_at"), providerSubmission: row["submission"],
                ledger: ledger.map { ($0.entry, $0.amount, Date(timeIntervalSince1970: $0.at)) })
        }
    }

    func renderSettings() async throws -> RenderSettings { try await RenderSettings.load(from: pool) }
}
