import FleetPostgres
import Foundation

/// Which jobs an operator means: `jobs.list`, and the bulk `jobs.retry` / `jobs.discard`. Every
/// field left nil matches all; the fields combine with AND.
public struct JobFilter: Sendable, Equatable, Encodable {
    public var states: [JobState]?
    public var kinds: [JobKind]?
    public var queues: [String]?
    /// The code of the job's latest error (`errors[-1].code`, kept in `last_error_code`).
    public var errorCode: String?
    public var createdAfter: Date?
    public var createdBefore: Date?
    public var finishedAfter: Date?
    public var finishedBefore: Date?
    /// Kinds left out (a bulk retry's jobs whose kind a `JobRetryGuard` decides for, taken apart).
    public var excludedKinds: [JobKind]?

    public init(
        states: [JobState]? = nil, kinds: [JobKind]? = nil, queues: [String]? = nil, errorCode: String? = nil,
        createdAfter: Date? = nil, createdBefore: Date? = nil, finishedAfter: Date? = nil, finishedBefore: Date? = nil
    ) {
        self.states = states
        self.kinds = kinds
        self.queues = queues
        self.errorCode = errorCode
        self.createdAfter = createdAfter
        self.createdBefore = createdBefore
        self.finishedAfter = finishedAfter
        self.finishedBefore = finishedBefore
    }

    /// The same filter restricted to `allowed` states (all of them when it named none).
    func restricted(to allowed: [JobState]) -> JobFilter {
        var copy = self
        copy.states = (states ?? allowed).filter(allowed.contains)
        return copy
    }

    /// The filter as a SQL condition on `jobs`, its parameters numbered from `first`. Only the
    /// fields in use appear, so each shape of filter is its own prepared statement with a plan
    /// for that shape (a catch-all `$1 IS NULL OR …` would get a generic plan that uses no index).
    func condition(firstParameter first: Int) -> (sql: String, parameters: [any PostgresEncodable]) {
        var clauses: [String] = []
        var parameters: [any PostgresEncodable] = []
        func add(_ clause: (String) -> String, _ value: any PostgresEncodable) {
            parameters.append(value)
            clauses.append(clause("$\(first + parameters.count - 1)"))
        }
        // One value is an equality, not `= ANY` of a one-element array: only then can an index
        // on (state, kind, id) hand rows over in id order, with no sort.
        func oneOf(_ column: String, _ type: String, _ values: [String]) {
            if values.count == 1 {
                add({ "\(column) = \($0)::\(type)" }, values[0])
            } else {
                add({ "\(column) = ANY(\($0)::\(type)[])" }, PostgresArray(values))
            }
        }
        if let states { oneOf("state", "job_state", states.map(\.rawValue)) }
        if let kinds { oneOf("kind", "text", kinds.map(\.rawValue)) }
        if let queues { oneOf("queue", "text", queues) }
        if let excludedKinds { add({ "kind <> ALL(\($0)::text[])" }, PostgresArray(excludedKinds.map(\.rawValue))) }
        if let errorCode { add({ "last_error_code = \($0)::text" }, errorCode) }
        if let createdAfter { add({ "created_at >= to_timestamp(\($0)::float8)" }, createdAfter.timeIntervalSince1970) }
        if let createdBefore { add({ "created_at < to_timestamp(\($0)::float8)" }, createdBefore.timeIntervalSince1970) }
        if let finishedAfter { add({ "finished_at >= to_timestamp(\($0)::float8)" }, finishedAfter.timeIntervalSince1970) }
        if let finishedBefore { add({ "finished_at < to_timestamp(\($0)::float8)" }, finishedBefore.timeIntervalSince1970) }
        return (clauses.isEmpty ? "true" : clauses.joined(separator: " AND "), parameters)
    }
}
