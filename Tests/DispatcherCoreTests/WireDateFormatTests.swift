@testable import FleetQueue
import FleetSupport
@testable import FleetTestSupport
import Foundation
import Testing

/// Every date the protocol sends has the one format `docs/protocol.md` names: ISO 8601 in UTC
/// with milliseconds and `Z` (`2026-11-24T15:19:05.534Z`), whatever produced it (a column read
/// as epoch seconds, a timestamp PostgreSQL wrote into jsonb, the server's clock).
@Suite struct WireDateFormatTests {
    static var format: Regex<Substring> { #/\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z/# }
    /// Anything that starts like a date is one.
    static var looksLikeADate: Regex<Substring> { #/\d{4}-\d{2}-\d{2}T.*/# }

    @Test func everyResultTypeSendsDatesInOneFormat() async throws {
        try await TestDispatcher.run { dispatcher in
            let pool = dispatcher.queue.pool
            try await RenderOperationTests.grant(dispatcher, "u1", credits: 3)
            try await dispatcher.queue.driver.workerRegister(
                WorkerRecord(id: "w1", host: "h", pid: 1, executable: "fleet-drill", kinds: [.drillNoop]))
            // A job with a failed attempt: its `errors[].at` is the timestamp PostgreSQL wrote into jsonb.
            let failed = try await dispatcher.queue.queue.enqueue(NewJob(kind: .drillNoop))
            try await pool.query("""
                UPDATE jobs SET state = 'dead', attempt = 1, started_at = now(), finished_at = now(),
                    errors = jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now(), 'error', 'boom', 'code', 'X', 'worker', 'w1'))
                WHERE id = $1
                """, [failed.id])
            let requests = [
                #"{"id":"ping","op":"ping"}"#,
                #"{"id":"enqueue","op":"enqueue","args":{"kind":"drill.noop","payload":{}}}"#,
                #"{"id":"status","op":"status","args":{"jobId":\#(failed.id)}}"#,
                #"{"id":"wait","op":"wait","args":{"jobId":\#(failed.id),"timeoutMs":0}}"#,
                #"{"id":"stats","op":"stats"}"#,
                #"{"id":"render.request","op":"render.request","args":{"renderId":"r1","userId":"u1","garmentId":"g1","bodyPhotoId":"b1","category":"tops"}}"#,
                #"{"id":"render.status","op":"render.status","args":{"renderId":"r1"}}"#,
                #"{"id":"render.wait","op":"render.wait","args":{"renderId":"r1","timeoutMs":0}}"#,
                #"{"id":"renders.list","op":"renders.list","args":{"userId":"u1"}}"#,
                #"{"id":"token.issue","op":"token.issue"}"#,
            ]
            var dates: [String: [String]] = [:]
            try await dispatcher.withRawConnection(.unix) { raw in
                try await raw.greeting()
                for request in requests {
                    try await raw.send(request + "\n")
                    let response = try await raw.response()
                    guard case .string(let id)? = response["id"] else { Issue.record("no id: \(response.jsonText)"); continue }
                    #expect(response["ok"] == .bool(true), "\(id): \(response.jsonText)")
                    dates[id] = Self.strings(in: response["result"] ?? .null).filter { $0.wholeMatch(of: Self.looksLikeADate) != nil }
                }
            }
            for (op, found) in dates {
                for date in found { #expect(date.wholeMatch(of: Self.format) != nil, "\(op): \(date)") }
            }
            // Each result type that carries dates was seen carrying them, errors[].at and the workers' included.
            for op in ["ping", "status", "wait", "stats", "render.request", "render.status", "render.wait", "renders.list", "token.issue"] {
                #expect(!(dates[op] ?? []).isEmpty, "\(op) sent no date")
            }
            #expect(dates["status"]?.count == 5)  // createdAt, runAt, startedAt, finishedAt, errors[0].at
            #expect(dates["stats"]?.count == 3)  // serverTime, the worker's startedAt and lastHeartbeatAt
        }
    }

    private static func strings(in value: JSONValue) -> [String] {
        switch value {
        case .string(let text): [text]
        case .array(let items): items.flatMap(strings)
        case .object(let fields): fields.values.flatMap(strings)
        case .null, .bool, .number: []
        }
    }
}
