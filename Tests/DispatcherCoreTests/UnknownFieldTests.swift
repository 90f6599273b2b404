@testable import DispatcherProtocol
import FleetSupport
@testable import FleetTestSupport
import Foundation
import Testing

/// `docs/protocol.md`: a field an op does not know is `BAD_ARGUMENT` naming it, on every op, so a
/// misspelt option is never silently ignored. Driven by the greeting's op list: an op added
/// without a row here fails the test.
@Suite(.timeLimit(.minutes(2))) struct UnknownFieldTests {
    /// Each op's smallest arguments that decode (what they ask is never run: an unknown field is
    /// refused before the op runs).
    static let validArguments: [String: String] = [
        "ping": "{}",
        "auth": #"{"token":"t"}"#,
        "enqueue": #"{"kind":"drill.noop"}"#,
        "jobs.enqueueGraph": #"{"jobs":[{"name":"a","kind":"drill.noop"}]}"#,
        "image.normalize": #"{"userId":"u1","uploadId":"up1","target":"body","imageId":"b1"}"#,
        "garment.process": #"{"userId":"u1","uploadId":"up1","garmentId":"g1"}"#,
        "account.purge": #"{"userId":"u1"}"#,
        "status": #"{"jobId":1}"#,
        "wait": #"{"jobId":1}"#,
        "cancel": #"{"jobId":1}"#,
        "stats": "{}",
        "render.request": #"{"renderId":"r1","userId":"u1","garmentId":"g1","bodyPhotoId":"b1","category":"tops"}"#,
        "render.status": #"{"renderId":"r1"}"#,
        "render.wait": #"{"renderId":"r1"}"#,
        "render.feedback": #"{"renderId":"r1","userId":"u1","vote":"up"}"#,
        "renders.list": #"{"userId":"u1"}"#,
        "credits.get": #"{"userId":"u1"}"#,
        "render.retry": #"{"renderId":"r1"}"#,
        "upload.presign": #"{"userId":"u1","contentType":"image/jpeg","contentLength":1}"#,
        "image.url": #"{"userId":"u1","kind":"body","id":"b1"}"#,
        "token.issue": "{}",
        "account.link": #"{"ephemeralToken":"eph_x","userId":"u1"}"#,
        "job.get": #"{"jobId":1}"#,
        "jobs.list": "{}",
        "job.retry": #"{"jobId":1}"#,
        "jobs.retry": #"{"limit":1}"#,
        "job.discard": #"{"jobId":1}"#,
        "jobs.discard": #"{"limit":1}"#,
        "queue.pause": #"{"kind":"drill.noop"}"#,
        "queue.resume": #"{"kind":"drill.noop"}"#,
        "audit.list": "{}",
        "limits.list": "{}",
        "limit.set": #"{"key":"k","maxRunning":1}"#,
        "limit.remove": #"{"key":"k"}"#,
    ]

    @Test func everyOpRefusesAnUnknownFieldNamingIt() async throws {
        try await TestDispatcher.run { dispatcher in
            try await dispatcher.withRawConnection(.unix) { raw in
                let greeting = try await raw.greeting()
                guard case .array(let listed)? = greeting["ops"] else { throw TestFailure("no ops in \(greeting.jsonText)") }
                let ops = listed.compactMap { if case .string(let op) = $0 { op } else { nil } }
                #expect(ops.count == listed.count && ops.count >= 30)
                for (index, op) in ops.enumerated() {
                    guard let valid = Self.validArguments[op] else {
                        Issue.record("no arguments for \(op) in UnknownFieldTests.validArguments: add its smallest valid ones")
                        continue
                    }
                    guard case .object(var arguments) = try JSONValue(json: valid) else { throw TestFailure("\(op): not an object") }
                    arguments["x"] = .number(1)
                    try await raw.send(#"{"id":\#(index + 1),"op":"\#(op)","args":\#(JSONValue.object(arguments).jsonText)}"# + "\n")
                    let answer = try await raw.response()
                    #expect(answer.errorCode == "BAD_ARGUMENT", "\(op): \(answer.jsonText)")
                    #expect(answer["error"]?["message"] == .string("unknown field args.x"), "\(op): \(answer.jsonText)")
                }
                // A nested object with no fields of its own is checked too.
                try await raw.send(#"{"id":1000,"op":"jobs.list","args":{"filter":{"x":1}}}"# + "\n")
                let nested = try await raw.response()
                #expect(nested["error"]?["message"] == .string("unknown field args.filter.x"), "\(nested.jsonText)")
            }
        }
    }
}
