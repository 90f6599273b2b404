import FleetPostgres
import Foundation

/// Renders across users with their credit ledger, for operators (the console's renders page).
extension RenderStore {
    public struct Filter: Sendable {
        public var status: String?
        public var provider: String?
        public var userID: String?

        public init(status: String? = nil, provider: String? = nil, userID: String? = nil) {
            self.status = status
            self.provider = provider
            self.userID = userID
        }
    }

    public struct Line: Sendable {
        public let id: String
        public let userID: String?
        public let provider: String
        public let status: String
        public let category: String
        public let charged: Bool
        public let errorCode: String?
        /// Why it failed (`RenderFailureCode`) and the message for people, once failed.
        public let failureCode: String?
        public let errorMessage: String?
        public let jobID: Int64?
        public let createdAt: Date
        public let providerSubmission: String?
        public let ledger: [(entry: String, amount: Int, at: Date)]
    }

    /// The newest renders matching the filter (at most 50), each with its credit ledger entries
    /// (found through the ledger's index on its user: only a user's renders have credits) and
    /// its provider submission.
    public func recent(_ filter: Filter) async throws -> [Line] {
        let rows = try await pool.query("""
            SELECT r.id, r.user_id, r.provider, r.status::text AS status, r.category, r.charged, r.error_code, r.failure_code, r.error_message, r.job_id,
                   extract(epoch FROM r.created_at) AS created_at, r.provider_submission::text AS submission,
                   (SELECT coalesce(json_agg(json_build_object('entry', l.entry, 'amount', l.amount, 'at', extract(epoch FROM l.created_at))
                                             ORDER BY l.id), '[]')::text
                    FROM credit_ledger l WHERE l.user_id = r.user_id AND l.render_id = r.id) AS ledger
            FROM renders r
            WHERE ($1::text IS NULL OR r.status::text = $1) AND ($2::text IS NULL OR r.provider = $2) AND ($3::text IS NULL OR r.user_id = $3)
            ORDER BY r.created_at DESC LIMIT 50
            """, [filter.status, filter.provider, filter.userID], planning: .eachCall).rows
        struct LedgerEntry: Decodable { let entry: String; let amount: Int; let at: Double }
        return try rows.map { row in
            let ledger = try JSONDecoder().decode([LedgerEntry].self, from: Data((row["ledger"] ?? "[]").utf8))
            return Line(
                id: try row.string("id"), userID: row["user_id"], provider: try row.string("provider"), status: try row.string("status"),
                category: try row.string("category"), charged: try row.bool("charged"), errorCode: row["error_code"],
                failureCode: row["failure_code"], errorMessage: row["error_message"], jobID: row["job_id"].flatMap { Int64($0) }, createdAt: try row.date("created_at"), providerSubmission: row["submission"],
                ledger: ledger.map { ($0.entry, $0.amount, Date(timeIntervalSince1970: $0.at)) })
        }
    }
}
