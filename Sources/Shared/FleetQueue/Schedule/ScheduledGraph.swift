import FleetSupport
import Foundation

/// A schedule entry's graph: `0 3 * * * => graph:nightly {"jobs": [...]}`, each job
/// `{"name": …, "kind": …, "payload": {…}, "after": [names]}` (`payload` and `after` optional),
/// the form of the protocol's `jobs.enqueueGraph` without options or ids of existing jobs.
/// Checked when the schedule is read (kinds known, names unique and known, no cycle), so a bad
/// graph stops the dispatcher at start rather than failing at its slot.
public struct ScheduledGraph: Sendable, Hashable {
    static let prefix = "graph:"

    /// `graph:<name>`: the entry's name, which keys its slots.
    public let entryName: String
    let jobs: [Job]

    struct Job: Sendable, Hashable, Decodable {
        let name: String
        let kind: String
        let payload: JSONObjectText?
        let after: [String]?
    }

    struct Document: Decodable {
        let jobs: [Job]
    }

    init(entryName: String, json: String, kinds: KnownKinds) throws(ScheduleLineError) {
        guard entryName.count > Self.prefix.count else { throw .syntax("a graph entry is named graph:<name>, not '\(entryName)'") }
        guard let document = try? JSONDecoder().decode(Document.self, from: Data(json.utf8)) else {
            throw .payload("the payload of \(entryName) is not {\"jobs\": [{\"name\", \"kind\", \"payload\"?, \"after\"?}, …]}: \(json)")
        }
        for job in document.jobs where !kinds.contains(JobKind(rawValue: job.kind)) {
            throw .payload("\(entryName): job '\(job.name)' names '\(job.kind)', which is not a job kind")
        }
        self.entryName = entryName
        jobs = document.jobs
        do { _ = try graph(idempotencyKey: nil) } catch { throw .payload("\(entryName): \(error)") }
    }

    /// The jobs to enqueue at a slot: `idempotencyKey` makes the slot's graph once, whoever fires it.
    public func graph(idempotencyKey: String?) throws(QueueError) -> JobGraph {
        try JobGraph(jobs.map { job in
            JobGraph.Node(name: job.name, job: NewJob(kind: JobKind(rawValue: job.kind), payload: job.payload?.text ?? "{}"), runsAfter: job.after ?? [])
        }, idempotencyKey: idempotencyKey)
    }
}

/// A JSON object kept as its text (a job's payload), decoded from any JSON object.
struct JSONObjectText: Sendable, Hashable, Decodable {
    let text: String

    init(from decoder: any Decoder) throws {
        let value = try JSONValue(from: decoder)
        guard case .object = value else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "a payload is a JSON object"))
        }
        text = value.jsonText
    }
}
