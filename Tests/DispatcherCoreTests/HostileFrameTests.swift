import DispatcherProtocol
import FleetSupport
@testable import FleetTestSupport
import Foundation
import NIOCore
import NIOPosix
import Testing

/// Frames a hostile or careless client sends: bounded work before `auth`, depth refused in one
/// pass, clear validation messages, the id and blank-line rules the protocol states.
@Suite struct HostileFrameTests {
    static func nested(_ depth: Int) -> String { String(repeating: "[", count: depth) + String(repeating: "]", count: depth) }

    @Test func framesNestedDeeperThanTheLimitAreRefusedInOnePass() async throws {
        try await TestDispatcher.run { dispatcher in
            try await dispatcher.withRawConnection(.unix) { raw in
                try await raw.greeting()
                // The frame is level 1, args 2, payload 3: 61 arrays inside reach the limit of 64.
                func enqueue(_ arrays: Int) -> String {
                    #"{"id":\#(arrays),"op":"enqueue","args":{"kind":"drill.noop","payload":{"a":\#(Self.nested(arrays))}}}"#
                }
                try await raw.send(enqueue(61) + "\n")
                #expect(try await raw.response()["ok"] == .bool(true))
                try await raw.send(enqueue(62) + "\n")
                let refused = try await raw.response()
                #expect(refused.errorCode == "MALFORMED_FRAME" && refused["id"] == .null)
                if case .string(let message)? = refused["error"]?["message"] { #expect(message.contains("nested deeper than 64 levels")) }
                // Half a megabyte of brackets costs one scan to the 65th: the parser names the
                // byte where it stopped.
                try await raw.send(String(repeating: "[", count: 1 << 19) + "\n")
                let deep = try await raw.response()
                #expect(deep.errorCode == "MALFORMED_FRAME")
                if case .string(let message)? = deep["error"]?["message"] {
                    #expect(message.contains("nested deeper than 64 levels at byte 64"), "\(message)")
                } else {
                    Issue.record("no message: \(deep.jsonText.prefix(300))")
                }
            }
        }
    }

    /// A payload as deep as allowed, repeated wide: each value is read once, when its frame is
    /// parsed, and once more when `status` reads it back. Rebuilding it through `Decodable`, which
    /// tries each case in turn, took seconds of CPU per pass (5 s for 64 KiB nested 60 deep in a
    /// release build, a thousand times a flat payload of its size), and the arguments' check and
    /// `status` each made a pass. Compared with a flat payload of the same size in the same run,
    /// each the fastest of three alternating tries, so a loaded machine slows both alike: 18,000
    /// arrays cost 10 to 25 times 300 strings in a debug build (494 against 20 ms on a quiet
    /// machine), so the bound, 100 times, sits between that and the defect's thousand.
    @Test func aWidePayloadNestedAsDeepAsAllowedCostsAboutAsMuchAsAFlatOne() async throws {
        try await TestDispatcher.run { dispatcher in
            try await dispatcher.withRawConnection(.unix) { raw in
                try await raw.greeting()
                // The frame is level 1, args 2, payload 3, `a` 4: 60 arrays inside reach the limit.
                let deep = "[" + Array(repeating: Self.nested(60), count: 300).joined(separator: ",") + "]"
                let flat = "[" + Array(repeating: "\"" + String(repeating: "x", count: 118) + "\"", count: 300).joined(separator: ",") + "]"
                #expect(deep.utf8.count == flat.utf8.count)
                var id = 0
                func roundTrip(_ value: String) async throws -> Duration {
                    id += 2
                    let started = ContinuousClock.now
                    try await raw.send(#"{"id":\#(id),"op":"enqueue","args":{"kind":"drill.noop","payload":{"a":\#(value)}}}"# + "\n")
                    let enqueued = try await raw.response()
                    guard case .number(let jobId)? = enqueued["result"]?["jobId"] else { throw TestFailure(String(enqueued.jsonText.prefix(300))) }
                    try await raw.send(#"{"id":\#(id + 1),"op":"status","args":{"jobId":\#(Int(jobId))}}"# + "\n")
                    let status = try await raw.response()
                    let elapsed = ContinuousClock.now - started
                    #expect(status["result"]?["payload"]?["a"] == (try JSONValue(json: value)))
                    return elapsed
                }
                var (deepFastest, flatFastest) = (Duration.seconds(3600), Duration.seconds(3600))
                for _ in 0..<3 {
                    deepFastest = min(deepFastest, try await roundTrip(deep))
                    flatFastest = min(flatFastest, try await roundTrip(flat))
                }
                print("wide payload nested 60 deep: enqueue and status \(deepFastest), a flat one of its size \(flatFastest)")
                #expect(deepFastest < flatFastest * 100, "deep \(deepFastest), flat \(flatFastest)")
            }
        }
    }

    /// Integer ids up to 2^53 - 1 either way are echoed exactly; beyond, a JSON number has no
    /// double of its own (2^53 + 1 reads as 2^53), so the answer could not be matched: refused.
    @Test func idsGoUpToTheLargestSafeIntegerAndLinesOfSpacesAreBlank() async throws {
        try await TestDispatcher.run { dispatcher in
            try await dispatcher.withRawConnection(.unix) { raw in
                try await raw.greeting()
                try await raw.send("   \n\t \t\r\n" + #"{"id":9007199254740991,"op":"ping"}"# + "\n")
                #expect(try await raw.response()["id"] == .number(9_007_199_254_740_991))
                try await raw.send(#"{"id":-9007199254740991,"op":"ping"}"# + "\n")
                #expect(try await raw.response()["id"] == .number(-9_007_199_254_740_991))
                for id in ["9007199254740993", "-9007199254740993", "9007199254740992", "9007199254740994", "1.5", "1e300"] {
                    try await raw.send(#"{"id":\#(id),"op":"ping"}"# + "\n")
                    let refused = try await raw.response()
                    #expect(refused.errorCode == "MALFORMED_FRAME" && refused["id"] == .null, "id \(id) was not refused")
                }
            }
        }
    }

    /// Messages name the field as the client wrote it, without the code again and without the
    /// decoder's own words.
    @Test func validationMessagesNameTheFieldAsWritten() async throws {
        try await TestDispatcher.run { dispatcher in
            let cases: [(args: String, op: String, message: String)] = [
                (#"{"kind":"drill.noop","options":{"priority":12}}"#, "enqueue", "args.options.priority 12 is outside 0...9"),
                (#"{"kind":"drill.noop","options":{"priority":"high"}}"#, "enqueue", "args.options.priority: expected an integer"),
                (#"{"kind":"drill.noop","options":{"maxAttempts":0}}"#, "enqueue", "args.options.maxAttempts must be at least 1"),
                (#"{"kind":"drill.noop","options":{"queue":""}}"#, "enqueue", "args.options.queue must be 1 to 64 bytes"),
                (#"{"kind":"drill.noop","options":{"delaySeconds":-1}}"#, "enqueue", "args.options.delaySeconds must be between 0 and 31622400"),
                (#"{"jobId":"seven"}"#, "status", "args.jobId: expected an integer"),
                (#"{}"#, "status", "missing field args.jobId"),
                (#"{"userId":"u1","uploadId":"x","target":"hat","imageId":"i"}"#, "image.normalize", "args.target: 'hat' is not one of body, garment"),
                (#"{"renderId":"r1","userId":"u1","vote":"thumbs-down"}"#, "render.feedback", "args.vote: 'thumbs-down' is not one of up, down"),
                (#"{"userId":"../u1","uploadId":"x","target":"body","imageId":"i"}"#, "image.normalize", "args.userId must be 1 to 64 characters of A-Z a-z 0-9 _ -"),
                (#"{"renderId":"r1","userId":"broke","garmentId":"g","bodyPhotoId":"b","category":"tops"}"#, "render.request", "no credit left"),
            ]
            try await dispatcher.withRawConnection(.unix) { raw in
                try await raw.greeting()
                for (index, item) in cases.enumerated() {
                    try await raw.send(#"{"id":\#(index),"op":"\#(item.op)","args":\#(item.args)}"# + "\n")
                    let response = try await raw.response()
                    #expect(response["error"]?["message"] == .string(item.message), "\(item.args) → \(response.jsonText)")
                }
            }
        }
    }
}
