import FakeProviders
@testable import FleetCallbacks
import FleetHTTPClient
@testable import FleetQueue
import FleetSupport
import Foundation

/// A database, a receiver on loopback the allow-list names (and nothing else), the signing
/// secrets of each kind (a rotation: current and previous; the HTTP jobs' unless `httpJobSecret`
/// is false), and a worker running the two outbound kinds as the dispatcher does.
struct OutboundRig {
    let q: TestQueue
    let receiver: FakeReceiver
    let settings: OutboundSettings

    static func secret() -> String { "whsec_" + Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString() }
    let current = OutboundRig.secret()
    let previous = OutboundRig.secret()
    let httpJobCurrent = OutboundRig.secret()
    let httpJobPrevious = OutboundRig.secret()

    init(
        answers: [FakeReceiver.Answer] = [], secrets: [String: String] = [:], moreHosts: [String] = [], httpJobSecret: Bool = true, q: TestQueue? = nil
    ) async throws {
        if let q { self.q = q } else { self.q = try await TestQueue.make() }
        receiver = try await FakeReceiver.start(answers: answers)
        var environment = [
            "FLEET_OUTBOUND_HOSTS": (["127.0.0.1:\(receiver.port)"] + moreHosts).joined(separator: ","),
            "FLEET_CALLBACK_SECRET": current, "FLEET_CALLBACK_PREVIOUS_SECRET": previous,
            "FLEET_OUTBOUND_SECRETS": String(decoding: try JSONEncoder().encode(secrets), as: UTF8.self),
        ]
        if httpJobSecret {
            environment["FLEET_HTTP_JOB_SECRET"] = httpJobCurrent
            environment["FLEET_HTTP_JOB_PREVIOUS_SECRET"] = httpJobPrevious
        }
        settings = try OutboundSettings.load(from: environment)
    }

    var hookURL: String { receiver.baseURL + "/hook" }

    /// The outbound handlers (and `more`), as the dispatcher runs them, each kind with its own
    /// signer (no `http.request` handler without its secret); `policy` replaces the settings' one.
    func worker(_ more: [any JobHandler] = [], concurrency: [JobKind: Int] = [:], policy: OutboundPolicy? = nil) -> RunningWorker {
        let http = CurlHTTPClient()
        var handlers: [any JobHandler] = [CallbackDeliveryHandler(
            sender: SignedSender(http: http, policy: policy ?? settings.policy, signer: settings.callbackSigner!), timeout: settings.callbackTimeout)]
        if let signer = settings.httpJobSigner {
            handlers.append(HTTPRequestHandler(sender: SignedSender(http: http, policy: policy ?? settings.policy, signer: signer), secrets: settings.secrets))
        }
        return RunningWorker(q, handlers: handlers + more, concurrency: [.callbackDeliver: 4, .httpRequest: 4].merging(concurrency) { $1 })
    }

    func job(_ id: Int64) async throws -> JobRecord {
        guard let job = try await q.queue.job(id: id) else { throw TestFailure("no job \(id)") }
        return job
    }

    func jobs(of kind: JobKind) async throws -> [JobRecord] {
        var records: [JobRecord] = []
        for row in try await q.pool.query("SELECT id FROM jobs WHERE kind = $1 ORDER BY id", [kind.rawValue]).rows {
            records.append(try await job(try row.int64("id")))
        }
        return records
    }

    /// Waits until every job of `kind` (at least `count`) has ended.
    func waitForEnded(_ kind: JobKind, count: Int = 1) async throws -> [JobRecord] {
        try await q.waitUntil(timeout: .seconds(90), "\(count) \(kind) job(s) ended") {
            let jobs = try await jobs(of: kind)
            return jobs.count >= count && jobs.allSatisfy(\.state.isTerminal)
        }
        return try await jobs(of: kind)
    }

    /// The `webhook-id` of a request the receiver got, when one of `secrets` signed it.
    func verifiedID(_ request: RecordedRequest, secrets: [String]) throws -> String {
        try StandardWebhook(secrets: secrets).verify(headers: request.headers, body: request.body)
    }

    func stop() async { await receiver.stop() }
}

extension RecordedRequest {
    var jsonValue: JSONValue? { try? JSONValue(json: String(decoding: body, as: UTF8.self)) }
}
