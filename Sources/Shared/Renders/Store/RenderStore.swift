import FleetPostgres
import FleetStorage
import Foundation
import Providers
import RenderLedger

/// The renders' rows, a method per statement. Each state change is a compare-and-set on the
/// render's status, and every credit settlement rides in the same statement as the status change
/// it belongs to (`CreditLedger`'s named statements), keyed in the ledger: a render ends once
/// and its credit is settled once, whoever gets there first (worker, webhook, timeout sweep).
public struct RenderStore: Sendable {
    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// Admission control's view of the providers, over the same pool.
    public var capacity: RenderCapacity { RenderCapacity(pool: pool) }

    static let columns = """
        id, user_id, ephemeral_token_id, owner_id, garment_id, body_photo_id, category, provider, status::text AS status,
        job_id, provider_job_id, result_path, error_code, failure_code, error_message, charged, garment_cutout, extract(epoch FROM deadline_at) AS deadline_at,
        feedback, retries, extract(epoch FROM created_at) AS created_at, extract(epoch FROM updated_at) AS updated_at
        """

    public func render(id: StorageID) async throws -> RenderRecord? {
        try await pool.query("SELECT \(Self.columns) FROM renders WHERE id = $1", [id.value]).rows.first.map(Self.record)
    }

    /// A user's renders, newest first.
    public func renders(userID: String, limit: Int) async throws -> [RenderRecord] {
        try await pool.query(
            "SELECT \(Self.columns) FROM renders WHERE user_id = $1 ORDER BY created_at DESC, id LIMIT $2", [userID, limit]
        ).rows.map(Self.record)
    }

    /// What `start` found.
    public enum Start: Sendable {
        /// Now `processing`, with the submission an earlier attempt made, if any.
        case started(RenderRecord, earlier: ProviderSubmission?)
        /// Deleted (its onboarding token expired).
        case gone
        /// Already `complete` or `failed`.
        case ended(RenderRecord)
        /// Still open, but its deadline has passed; with the submission an earlier attempt made
        /// (to cancel at the provider), if any.
        case pastDeadline(RenderRecord, earlier: ProviderSubmission?)
    }

    /// pending → processing, in one statement that also returns the row and the provider
    /// submission an earlier attempt kept (so a worker taking over after a crash asks for that
    /// job instead of paying for a second one). `beforeCommit` runs in the same transaction once
    /// the render started, and refuses the start by throwing (rolled back: the render stays as it
    /// was): the worker looks there for the jobs still making its photos, so that reading the
    /// render, looking and starting cost one transaction.
    public func start(
        id: StorageID, beforeCommit: (RenderRecord, PostgresConnection) async throws -> Void = { _, _ in }
    ) async throws -> Start {
        try await pool.withConnection { connection in
            try await connection.transaction { connection in
                let rows = try await connection.query("""
                    WITH started AS (
                        UPDATE renders SET status = 'processing', started_at = coalesce(started_at, now()), updated_at = now()
                        WHERE id = $1 AND status IN ('pending', 'processing') AND deadline_at > now()
                        RETURNING \(Self.columns), provider_submission::text AS submission
                    )
                    SELECT true AS started, * FROM started
                    UNION ALL
                    SELECT false, \(Self.columns), provider_submission::text FROM renders WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM started)
                    """, [id.value]).rows
                guard let row = rows.first else { return .gone }
                let render = try Self.record(row)
                let earlier = try row["submission"].map { try JSONDecoder().decode(ProviderSubmission.self, from: Data($0.utf8)) }
                guard try row.bool("started") else { return render.status.isTerminal ? .ended(render) : .pastDeadline(render, earlier: earlier) }
                try await beforeCommit(render, connection)
                return .started(render, earlier: earlier)
            }
        }
    }

    /// processing → pending again: a render started before its photos were found stored waits
    /// for them as one no worker started (`RenderTimeoutSweeper` fails such renders whose job
    /// ended without running them).
    public func unstart(id: StorageID) async throws {
        try await pool.query(
            "UPDATE renders SET status = 'pending', started_at = NULL, updated_at = now() WHERE id = $1 AND status = 'processing' AND provider_submission IS NULL", [id.value])
    }

    /// Records what the render sent its provider, in one write after the submit: which garment
    /// image (`garment_cutout`, so the render's status says what it was made from) and, for a job
    /// still running there (`submission`), what the provider returned, so a worker that takes over
    /// after a crash asks for the same job instead of submitting (and paying) again.
    public func recordSubmission(id: StorageID, cutout: Bool, submission: ProviderSubmission?) async throws {
        let json = try submission.map { String(decoding: try JSONEncoder().encode($0), as: UTF8.self) }
        try await pool.query("""
            UPDATE renders SET garment_cutout = $2, provider_job_id = coalesce($3, provider_job_id),
                provider_submission = coalesce($4::jsonb, provider_submission), updated_at = now()
            WHERE id = $1 AND status = 'processing'
            """, [id.value, cutout, submission?.jobID, json])
    }

    /// What ends a render's job in the transaction that ends the render (`JobContext.end`).
    public typealias JobEnd = (PostgresConnection) async throws -> Void

    /// processing → complete with its result, consuming the reserved credit in the same
    /// statement (`CreditLedger.completeRender`), and ending its job with it (`endingJob`, see
    /// `settle`). False when the render had already ended or its deadline passed: then the result
    /// is not used (a late result never revives a render) and the job is not ended here.
    public func complete(id: StorageID, resultPath: String, endingJob: JobEnd? = nil) async throws -> Bool {
        try await settle(id: id, CreditLedger.completeRender, [id.value, resultPath], endingJob: endingJob) != nil
    }

    /// → failed with `failure` (its code, its message, and the business code it implies),
    /// releasing the reserved credit (`CreditLedger.failRenders`), and ending its job with it
    /// (`endingJob`, see `settle`). False when it had already ended.
    public func fail(id: StorageID, failure: RenderFailure, endingJob: JobEnd? = nil) async throws -> Bool {
        try await failRender(id: id, failure: failure, endingJob: endingJob) != nil
    }

    /// As `fail`, answering what ended (its provider and whether it was charged, for the
    /// metrics), or nil.
    public func failRender(id: StorageID, failure: RenderFailure, endingJob: JobEnd? = nil) async throws -> Ended? {
        let arguments: [(any PostgresEncodable)?] = [
            PostgresArray([id.value]), failure.code.errorCode.rawValue, true, failure.code.rawValue, failure.message,
        ]
        guard let row = try await settle(id: id, CreditLedger.failRenders, arguments, endingJob: endingJob) else { return nil }
        return Ended(id: id, provider: try row.string("provider"), charged: try row.bool("charged"), submission: nil)
    }

    /// Runs `statement` (one of `CreditLedger`'s, ending render `id` with its credit: a row when it
    /// ended it) and announces the end. With `endingJob`, the render's job ends in the same
    /// transaction, the announcement too: the render, its credit and its job commit together or
    /// not at all, so a worker killed before the commit leaves the render open and its job running,
    /// to be resumed and charged once. The announcement rides inside because the job's end
    /// notifies there anyway (a render's job holds limit keys: `fleet_jobs_finished`), so the commit
    /// holds PostgreSQL's notify lock either way; without a job to end, it is sent after the commit
    /// (`announceFinished`).
    private func settle(
        id: StorageID, _ statement: String, _ arguments: [(any PostgresEncodable)?], endingJob: JobEnd?
    ) async throws -> PostgresRow? {
        guard let endingJob else {
            let row = try await pool.query(statement, arguments).rows.first
            if row != nil { await announceFinished([id]) }
            return row
        }
        return try await pool.withConnection { connection in
            try await connection.transaction { connection in
                guard let row = try await connection.query(statement, arguments).rows.first else { return nil }
                try await connection.announce(id.value, on: RenderChannel.finished)
                try await endingJob(connection)
                return row
            }
        }
    }

    public struct Ended: Sendable, Equatable {
        public let id: StorageID
        public let provider: String
        public let charged: Bool
        /// The provider job a worker submitted for it, if one did: still running there.
        public let submission: ProviderSubmission?
        /// Its `render.run` job when no worker had started the render (still `pending`: the job
        /// waits for the render's inputs, or for a worker); to be cancelled, so nothing runs it.
        public var unstartedJobID: Int64? = nil
    }

    /// Up to `limit` renders past their deadline and still open (their worker died, or never
    /// started) fail with `RENDER_TIMEOUT` (`TIMEOUT`), credits released. Two sweepers finding the same
    /// render: the second's compare-and-set waits for the first's commit and ends nothing.
    public func failExpired(limit: Int) async throws -> [Ended] {
        let rows = try await pool.query("""
            SELECT id, CASE WHEN status = 'pending' THEN job_id END AS unstarted_job_id
            FROM renders WHERE status IN ('pending', 'processing') AND deadline_at <= now()
            ORDER BY deadline_at LIMIT $1
            """, [limit]).rows
        guard !rows.isEmpty else { return [] }
        let expired = try rows.map { try $0.string("id") }
        var unstartedJobs: [String: Int64] = [:]
        for row in rows {
            if let job = row["unstarted_job_id"].flatMap(Int64.init) { unstartedJobs[try row.string("id")] = job }
        }
        let failure = RenderFailure(.timeout, "the render's deadline passed before any worker finished it")
        let arguments: [(any PostgresEncodable)?] = [
            PostgresArray(expired), failure.code.errorCode.rawValue, false, failure.code.rawValue, failure.message,
        ]
        let ended = try await pool.query(CreditLedger.failRenders, arguments).rows.map {
            let id = try $0.string("id")
            return Ended(id: try StorageID(id), provider: try $0.string("provider"), charged: try $0.bool("charged"),
                         // Unreadable (written by another version): the render is ended all the same,
                         // its provider job left to run out rather than the batch's bookkeeping lost.
                         submission: $0["submission"].flatMap { try? JSONDecoder().decode(ProviderSubmission.self, from: Data($0.utf8)) },
                         unstartedJobID: unstartedJobs[id])
        }
        await announceFinished(ended.map(\.id))
        return ended
    }

    /// Up to `limit` renders no worker has started (`pending`), soonest deadline first, with their
    /// `render.run` job: render id → job id.
    public func unstartedRenderJobs(limit: Int) async throws -> [StorageID: Int64] {
        var jobs: [StorageID: Int64] = [:]
        for row in try await pool.query("""
            SELECT id, job_id FROM renders WHERE status = 'pending' AND job_id IS NOT NULL ORDER BY deadline_at LIMIT $1
            """, [limit]).rows {
            jobs[try StorageID(row.string("id"))] = try row.int64("job_id")
        }
        return jobs
    }

    /// Wakes `render.wait`s on `fleet_renders_finished`, after an ending commit that notifies
    /// nothing else, without a flush of its own: inside, the notification would make that commit
    /// hold PostgreSQL's notify lock through its flush, serialising such settlements. Lost (the
    /// process died between the two), it costs a waiter one recheck interval.
    private func announceFinished(_ ids: [StorageID]) async {
        try? await pool.notify(RenderChannel.finished, ids.map(\.value))
    }

    public enum FeedbackOutcome: Sendable, Equatable {
        case recorded(refunded: Bool)
        case notFound
        /// Feedback is for finished renders only.
        case notComplete
    }

    /// Thumbs up or down on a complete render of `userID`. A thumbs-down refunds the consumed
    /// credit, once, however often it is sent.
    public func feedback(renderID: StorageID, userID: String, vote: String, category: String?) async throws -> FeedbackOutcome {
        let rows = try await pool.query(CreditLedger.recordFeedback, [renderID.value, userID, vote, category]).rows
        guard let row = rows.first else { return .notFound }
        if try row.int("found") == 1 { return .recorded(refunded: try row.int("refunded") == 1) }
        return row["status"] == nil ? .notFound : .notComplete
    }

    /// The payload of a provider's callback for `requestID`, if the dispatcher received one.
    public func providerEvent(provider: String, requestID: String) async throws -> Data? {
        try await pool.query(
            "SELECT payload::text AS payload FROM provider_events WHERE provider = $1 AND request_id = $2", [provider, requestID]
        ).rows.first?["payload"].map { Data($0.utf8) }
    }

    /// Stores a verified callback once per `requestID` and announces `announce` (default:
    /// `requestID`) on `fleet_render_events` to wake whoever waits for it. False for a duplicate
    /// (acknowledged, neither stored nor announced again). `payload` must be JSON. The wake-up is
    /// sent after the commit (see `PostgresPool.notify`); should it be lost, the waiter's next
    /// look at the table finds the event.
    public func recordProviderEvent(provider: String, requestID: String, announce: String? = nil, payload: Data) async throws -> Bool {
        let stored = try await pool.query("""
            INSERT INTO provider_events (provider, request_id, payload) VALUES ($1, $2, $3::jsonb)
            ON CONFLICT DO NOTHING RETURNING request_id
            """, [provider, requestID, String(decoding: payload, as: UTF8.self)]).rows.count == 1
        if stored { try? await pool.notify(RenderChannel.events, CallbackAnnouncement(requestID: announce ?? requestID, payload: payload)) }
        return stored
    }

    static func record(_ row: PostgresRow) throws -> RenderRecord {
        RenderRecord(
            id: try StorageID(row.string("id")), userID: row["user_id"], ephemeralTokenID: row["ephemeral_token_id"],
            ownerID: try StorageID(row.string("owner_id")), garmentID: try StorageID(row.string("garment_id")),
            bodyPhotoID: try StorageID(row.string("body_photo_id")),
            category: GarmentCategory(rawValue: try row.string("category")) ?? .tops,
            provider: try row.string("provider"), status: RenderStatus(rawValue: try row.string("status")) ?? .failed,
            jobID: row["job_id"].flatMap(Int64.init), providerJobID: row["provider_job_id"],
            resultPath: row["result_path"], errorCode: row["error_code"], failureCode: row["failure_code"], errorMessage: row["error_message"],
            charged: try row.bool("charged"),
            garmentCutout: row["garment_cutout"].map { $0 == "t" },
            deadlineAt: try row.date("deadline_at"), feedback: row["feedback"],
            retries: try row.int("retries"), createdAt: try row.date("created_at"), updatedAt: try row.date("updated_at"))
    }
}

/// The renders' NOTIFY channels, each with its payload (`docs/schema.md`, "NOTIFY channels").
public enum RenderChannel {
    /// The dispatcher announces provider callbacks here (`CallbackAnnouncement`); render workers
    /// LISTEN to it (`RenderEvents`).
    public static let events = NotificationTopic<CallbackAnnouncement>(
        "fleet_render_events", encode: { $0.text }, decode: { CallbackAnnouncement(text: $0) })
    /// Sent with the commit that ends a render (the render worker's, which also ends its job) or
    /// right after it (payload: the render id); the dispatcher's `render.wait` LISTENs to it.
    public static let finished = NotificationTopic<String>.text("fleet_renders_finished")
}

/// A provider callback stored by the dispatcher, as `fleet_render_events` carries it: the
/// provider's request id its waiter knows, then, after a newline, the callback's body when the
/// whole fits in a notification, so that the worker waiting for it reads no table. A larger body
/// is announced by its id alone and read from `provider_events`.
public struct CallbackAnnouncement: Sendable, Equatable {
    /// Under PostgreSQL's 8,000-byte payload limit, with room to spare.
    static let maxText = 7_900

    public let requestID: String
    /// The callback's body (JSON); nil when it did not fit.
    public let payload: Data?

    /// `payload` is dropped when the announcement would not fit, or when the id has a newline.
    public init(requestID: String, payload: Data?) {
        self.requestID = requestID
        let fits = payload.map { requestID.utf8.count + 1 + $0.count <= Self.maxText } ?? false
        self.payload = fits && !requestID.contains("\n") ? payload : nil
    }

    public init(text: String) {
        guard let newline = text.firstIndex(of: "\n") else {
            self.init(requestID: text, payload: nil)
            return
        }
        self.init(requestID: String(text[..<newline]), payload: Data(text[text.index(after: newline)...].utf8))
    }

    public var text: String {
        payload.map { requestID + "\n" + String(decoding: $0, as: UTF8.self) } ?? requestID
    }
}
