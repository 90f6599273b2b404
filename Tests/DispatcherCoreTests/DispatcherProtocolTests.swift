import DispatcherCore
@testable import FleetQueue
@testable import DispatcherProtocol
import FleetSupport
@testable import FleetTestSupport
import Foundation
import NIOCore
import Testing

/// The wire: framing, auth, pipelining, limits and timeouts, hostile input.
@Suite(.timeLimit(.minutes(3))) struct DispatcherProtocolTests {
    /// A client started before its dispatcher (scripts, tests) retries connecting: each failed
    /// attempt must end with an error, not a leaked greeting promise.
    @Test func connectingWhereNothingListensFailsCleanly() async throws {
        let missing = temporaryPath("no-dispatcher") + ".sock"
        for _ in 0..<3 {
            await #expect(throws: (any Error).self) { _ = try await DispatcherClient.connect(to: .unix(path: missing)) }
            await #expect(throws: (any Error).self) {
                _ = try await DispatcherClient.connect(to: .tcp(host: "127.0.0.1", port: try freePort()), connectTimeout: .seconds(1))
            }
        }
    }

    @Test func tcpRequiresTheTokenAndAWrongOneClosesTheConnection() async throws {
        try await TestDispatcher.run { dispatcher in
            try await dispatcher.withRawConnection(.tcp) { raw in
                #expect(try await raw.greeting()["authRequired"] == .bool(true))
                try await raw.send(#"{"id":1,"op":"ping"}"# + "\n" + #"{"id":2,"op":"enqueue","args":{"kind":"drill.noop"}}"# + "\n")
                let first = try await raw.response(), second = try await raw.response()
                let byID = [first["id"]: first, second["id"]: second]
                #expect(byID[.number(1)]?["ok"] == .bool(true))
                #expect(byID[.number(2)]?.errorCode == "UNAUTHENTICATED")
                // auth is handled in order: the enqueue right behind it is accepted.
                try await raw.send(#"{"id":3,"op":"auth","args":{"token":"\#(TestDispatcher.token)"}}"# + "\n"
                                   + #"{"id":4,"op":"enqueue","args":{"kind":"drill.noop"}}"# + "\n")
                #expect(try await raw.response() == (try JSONValue(json: #"{"type":"response","id":3,"ok":true,"result":{"authenticated":true,"name":"default","role":"operate"},"error":null}"#)))
                #expect(try await raw.response()["ok"] == .bool(true))
            }
            try await dispatcher.withRawConnection(.tcp) { raw in
                try await raw.greeting()
                try await raw.send(#"{"id":"a","op":"auth","args":{"token":"guess"}}"# + "\n" + #"{"id":"b","op":"ping"}"# + "\n")
                let refused = try await raw.response()
                #expect(refused["id"] == .string("a") && refused.errorCode == "UNAUTHENTICATED")
                #expect(try await raw.next() == nil)
            }
            await #expect(throws: DispatcherError(.unauthenticated, "wrong token")) {
                try await DispatcherClient.connect(to: dispatcher.tcp, token: "not-the-token")
            }
            // The Unix socket needs no token; its file admits only the owner.
            let client = try await dispatcher.client(.unix, token: nil)
            #expect(try await client.enqueue(kind: "drill.noop").isNew)
            await client.close()
            let mode = try FileManager.default.attributesOfItem(atPath: dispatcher.settings.socketPath!)[.posixPermissions] as? Int
            #expect(mode == 0o600)
        }
    }

    @Test func malformedFramesAreAnsweredAndTheConnectionGoesOn() async throws {
        try await TestDispatcher.run { dispatcher in
            try await dispatcher.withRawConnection(.unix) { raw in
                try await raw.greeting()
                let frames = [
                    ("not json", nil, "MALFORMED_FRAME"),
                    ("[1,2]", nil, "MALFORMED_FRAME"),
                    (#"{"op":"ping"}"#, nil, "MALFORMED_FRAME"),
                    (#"{"id":1.5,"op":"ping"}"#, nil, "MALFORMED_FRAME"),
                    (#"{"id":{"a":1},"op":"ping"}"#, nil, "MALFORMED_FRAME"),
                    (#"{"id":1}"#, JSONValue.number(1), "MALFORMED_FRAME"),
                    (#"{"id":2,"op":7}"#, .number(2), "MALFORMED_FRAME"),
                    (#"{"id":3,"op":"launch"}"#, .number(3), "UNKNOWN_OP"),
                    (#"{"id":4,"op":"status","args":[]}"#, .number(4), "BAD_ARGUMENT"),
                    (#"{"id":5,"op":"status","args":{}}"#, .number(5), "BAD_ARGUMENT"),
                    (#"{"id":6,"op":"status","args":{"jobId":"seven"}}"#, .number(6), "BAD_ARGUMENT"),
                    (#"{"id":7,"op":"enqueue","args":{"kind":"drill.noop","options":{"idempotency_key":"k"}}}"#, .number(7), "BAD_ARGUMENT"),
                    (#"{"id":8,"op":"enqueue","args":{"kind":"drill.noop","payload":[1]}}"#, .number(8), "BAD_ARGUMENT"),
                    (String(repeating: "[", count: 100_000), nil, "MALFORMED_FRAME"),
                    ("\u{FF}\u{FE}{\"id\":1}", nil, "MALFORMED_FRAME"),
                ]
                for (frame, id, code) in frames {
                    try await raw.send(frame + "\r\n")
                    let response = try await raw.response()
                    #expect(response.errorCode == code, "\(frame.prefix(60)) → \(response.jsonText)")
                    #expect(response["id"] == (id ?? .null), "\(frame.prefix(60))")
                    #expect(response["result"] == .null)
                }
                // Blank lines are skipped; the connection still works.
                try await raw.send("\n\r\n" + #"{"id":"last","op":"ping"}"# + "\n")
                #expect(try await raw.response()["id"] == .string("last"))
            }
            let message = try await dispatcher.withRawConnection(.unix) { raw in
                try await raw.greeting()
                try await raw.send(#"{"id":5,"op":"status","args":{}}"# + "\n")
                return try await raw.response()["error"]?["message"]
            }
            #expect(message == .string("missing field args.jobId"))
        }
    }

    /// Several requests written at once are all answered with their ids; a slow one does not
    /// hold back the ones behind it.
    @Test func pipelinedRequestsAreAnsweredByIdAndOutOfOrder() async throws {
        try await TestDispatcher.run { dispatcher in
            let job = try await dispatcher.queue.queue.enqueue(NewJob(kind: .drillNoop))
            try await dispatcher.withRawConnection(.unix) { raw in
                try await raw.greeting()
                // The wait is answered only when its job ends, which the test brings about once
                // the 30 requests behind it are answered.
                var batch = #"{"id":"slow","op":"wait","args":{"jobId":\#(job.id),"timeoutMs":60000}}"# + "\n"
                for i in 0..<30 {
                    let op = [#""op":"ping""#, #""op":"status","args":{"jobId":\#(job.id)}"#,
                              #""op":"enqueue","args":{"kind":"drill.noop","options":{"idempotencyKey":"k\#(i % 5)"}}"#][i % 3]
                    batch += #"{"id":\#(i),\#(op)}"# + "\n"
                }
                try await raw.send(batch)
                var answered: [JSONValue] = []
                for _ in 0..<30 {
                    let response = try await raw.response()
                    #expect(response["ok"] == .bool(true), "\(response.jsonText)")
                    answered.append(response["id"] ?? .null)
                }
                #expect(Set(answered) == Set((0..<30).map { JSONValue.number(Double($0)) }))
                try await raw.send(#"{"id":"end","op":"cancel","args":{"jobId":\#(job.id)}}"# + "\n")
                var last: Set<JSONValue> = []
                for _ in 0..<2 {
                    let response = try await raw.response()
                    #expect(response["ok"] == .bool(true), "\(response.jsonText)")
                    last.insert(response["id"] ?? .null)
                }
                #expect(last == [.string("slow"), .string("end")])
            }
            // Five distinct keys among ten enqueues (the waited job cancelled).
            #expect(try await dispatcher.queue.states()[.available] == 5)
            // The Swift client pipelines concurrent calls on one connection the same way.
            let client = try await dispatcher.client()
            let ids = try await withThrowingTaskGroup(of: Int64.self) { group in
                for _ in 0..<200 { group.addTask { try await client.enqueue(kind: "drill.noop").jobId } }
                return try await group.reduce(into: Set<Int64>()) { $0.insert($1) }
            }
            #expect(ids.count == 200)
            await client.close()
        }
    }

    /// Single enqueues, answered from their batch's commit without a task of their own, hold the
    /// in-flight limit as other requests do: with one request in flight at most, enqueues sent
    /// while a `wait` runs wait for it to end, and keep their places. The wait ends when its job
    /// is cancelled, so the answers come wait, then the enqueues in the order sent; an enqueue
    /// started beside the running wait would be answered before it.
    @Test func enqueuesBehindARequestWaitingForRoomKeepTheirPlaces() async throws {
        try await TestDispatcher.run({ $0.maxInFlight = 1 }) { dispatcher in
            let job = try await dispatcher.queue.queue.enqueue(NewJob(kind: .drillNoop))
            try await dispatcher.withRawConnection(.unix) { raw in
                try await raw.greeting()
                try await raw.send(#"{"id":"slow","op":"wait","args":{"jobId":\#(job.id),"timeoutMs":60000}}"# + "\n")
                // The wait has started (it marks its job watched): the enqueues sent now find the
                // only slot taken.
                try await dispatcher.queue.waitUntil(timeout: .seconds(20), "the wait holds the only slot") {
                    try await dispatcher.queue.pool.query("SELECT finish_watched FROM jobs WHERE id = $1", [job.id]).rows[0].bool("finish_watched")
                }
                try await raw.send((0..<5).map { #"{"id":\#($0),"op":"enqueue","args":{"kind":"drill.noop","payload":{"n":\#($0)}}}"# + "\n" }.joined())
                _ = try await dispatcher.queue.queue.cancel(id: job.id)
                var answered: [JSONValue] = []
                for _ in 0..<6 {
                    let response = try await raw.response()
                    #expect(response["ok"] == .bool(true), "\(response.jsonText)")
                    answered.append(response["id"] ?? .null)
                }
                #expect(answered == [.string("slow")] + (0..<5).map { JSONValue.number(Double($0)) })
            }
            let order = try await dispatcher.queue.pool.query(
                "SELECT (payload->>'n')::int AS n FROM jobs WHERE payload ? 'n' ORDER BY id").rows.map { try $0.int("n") }
            #expect(order == Array(0..<5))
        }
    }

    /// A 10 MB frame: an error, the connection closed, nothing buffered beyond the limit, the server fine.
    @Test func aFrameTooLargeIsRefusedAndTheConnectionClosed() async throws {
        try await TestDispatcher.run { dispatcher in
            try await dispatcher.withRawConnection(.tcp) { raw in
                #expect(try await raw.greeting()["maxFrameBytes"] == .number(Double(WireFormat.defaultMaxFrameBytes)))
                let outbound = raw.outbound
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        // The server stops listening part way; our write may fail then.
                        try? await outbound.write(ByteBuffer(repeating: UInt8(ascii: "a"), count: 10 << 20))
                    }
                    let refusal = try await raw.response()
                    #expect(refusal.errorCode == "FRAME_TOO_LARGE" && refusal["id"] == .null)
                    #expect(try await raw.next() == nil)
                    group.cancelAll()
                }
            }
            // A frame just under the limit is fine, with its newline in a separate write.
            let client = try await dispatcher.client(.tcp)
            let bulky = String(repeating: "x", count: WireFormat.defaultMaxFrameBytes - 200)
            let job = try await client.enqueue(kind: "drill.noop", payload: ["blob": .string(bulky)])
            #expect(try await client.status(jobId: job.jobId).payload["blob"] == .string(bulky))
            await client.close()
        }
    }

    /// Half a frame then silence: cut off after the frame timeout, while another client is served.
    @Test func aClientThatStallsMidFrameIsCutOff() async throws {
        try await TestDispatcher.run({ $0.frameTimeout = .milliseconds(300) }) { dispatcher in
            let other = try await dispatcher.client()
            let started = ContinuousClock.now
            try await dispatcher.withRawConnection(.tcp) { raw in
                try await raw.greeting()
                try await raw.send(#"{"id":1,"op":"pi"#)
                _ = try await other.ping()
                let refusal = try await raw.response()
                #expect(refusal.errorCode == "FRAME_TIMEOUT" && refusal["id"] == .null)
                #expect(try await raw.next() == nil)
            }
            // Never before the timeout (a lower bound, which load cannot break).
            #expect(ContinuousClock.now - started >= .milliseconds(300))
            _ = try await other.ping()
            await other.close()
        }
    }

    /// The frame timeout counts only while the server is reading: a client whose later frames
    /// wait in the socket while the server holds back (requests in flight at the limit) is not cut off.
    ///
    /// Every frame is in the socket before the server reads the first (126 kB, within a Unix
    /// socket's send buffer), so a frame is only ever incomplete while the server holds back, never
    /// while the client waits for a core. The server holds back 100 ms a frame, several frames at
    /// a time while one is part-read; the frame timeout, 500 ms, leaves a loaded machine room to
    /// be late, and a clock that ran while holding back fails this (14 of 60 answered).
    @Test func backpressureDoesNotCountAgainstTheFrameTimeout() async throws {
        try await TestDispatcher.run({ $0.frameTimeout = .milliseconds(500); $0.maxInFlight = 1 }) { dispatcher in
            let job = try await dispatcher.queue.queue.enqueue(NewJob(kind: .drillNoop))
            // Long ids make the frames span many socket reads, so one is always part-read while the server holds back.
            let padding = String(repeating: "p", count: 2000)
            let count = 60
            let frames = (0..<count).map { #"{"id":"\#($0)\#(padding)","op":"wait","args":{"jobId":\#(job.id),"timeoutMs":100}}"# + "\n" }.joined()
            let answered = try await dispatcher.withRawConnection(.unix) { raw in
                try await raw.greeting()
                try await raw.send(frames)
                var answered = 0
                while answered < count, let frame = try await raw.next() {
                    #expect(frame["ok"] == .bool(true), "\(frame.jsonText)")
                    answered += 1
                }
                return answered
            }
            #expect(answered == count)
        }
    }

    /// An idle connection is closed; one waiting on a long request is not, until it is idle again.
    @Test func idleConnectionsAreClosedButNotWhileARequestIsInFlight() async throws {
        try await TestDispatcher.run({ $0.idleTimeout = .seconds(2) }) { dispatcher in
            try await dispatcher.withRawConnection(.unix) { raw in
                try await raw.greeting()
                let refusal = try await raw.response()
                #expect(refusal.errorCode == "IDLE_TIMEOUT" && refusal["id"] == .null)
                #expect(try await raw.next() == nil)
            }
            let job = try await dispatcher.queue.queue.enqueue(NewJob(kind: .drillNoop))
            try await dispatcher.withRawConnection(.unix) { raw in
                try await raw.greeting()
                try await raw.send(#"{"id":1,"op":"wait","args":{"jobId":\#(job.id),"timeoutMs":5000}}"# + "\n")
                let waited = try await raw.response()
                #expect(waited["id"] == .number(1) && waited["result"]?["timedOut"] == .bool(true))
                #expect(try await raw.response().errorCode == "IDLE_TIMEOUT")
                #expect(try await raw.next() == nil)
            }
        }
    }

    @Test func connectionsBeyondTheLimitAreRefused() async throws {
        try await TestDispatcher.run({ $0.maxConnections = 2 }) { dispatcher in
            let first = try await dispatcher.client()
            let second = try await dispatcher.client()
            await #expect(throws: DispatcherError.self) { try await dispatcher.client() }
            await first.close()
            try await dispatcher.queue.waitUntil("a slot to free up") { (try? await dispatcher.client().close()) != nil }
            _ = try await second.ping()
            await second.close()
        }
    }

    @Test func fiveHundredConcurrentConnections() async throws {
        try await TestDispatcher.run { dispatcher in
            let answered = try await withThrowingTaskGroup(of: Int.self) { group in
                for index in 0..<500 {
                    group.addTask {
                        let client = try await dispatcher.client(index.isMultiple(of: 2) ? .tcp : .unix)
                        _ = try await client.ping()
                        _ = try await client.status(jobId: try await client.enqueue(kind: "drill.noop").jobId)
                        return client.greeting.version
                    }
                }
                return try await group.reduce(0) { count, _ in count + 1 }
            }
            #expect(answered == 500)
            #expect(try await dispatcher.queue.states()[.available] == 500)
        }
    }

    /// Random bytes, and random JSON thrown at every op: never a crash, and ping still answers.
    @Test func fuzzedInputNeverBreaksTheServer() async throws {
        var generator = SeededGenerator(seed: 20_261_122)
        try await TestDispatcher.run({ $0.frameTimeout = .milliseconds(200) }) { dispatcher in
            for round in 0..<40 {
                var bytes = (0..<Int.random(in: 1...4096, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
                if round.isMultiple(of: 2) { bytes += Array("\n".utf8) }
                let chunk = bytes
                try? await dispatcher.withRawConnection(round.isMultiple(of: 3) ? .unix : .tcp) { raw in
                    try await raw.greeting()
                    try await raw.send(chunk)
                    try await raw.send("\n" + #"{"id":"after","op":"ping"}"# + "\n")
                    // Answers, errors or a close: anything but a crash.
                    while let frame = try await raw.next(), frame["id"] != .string("after") {}
                }
            }
            // Not auth: a wrong token closes the connection (tested above).
            let ops = ["ping", "enqueue", "image.normalize", "garment.process", "account.purge", "status", "wait", "cancel", "stats"]
            let fields = ["kind", "payload", "options", "queue", "priority", "maxAttempts", "delaySeconds", "idempotencyKey", "userId",
                          "uploadId", "target", "imageId", "garmentId", "jobId", "timeoutMs", "windowSeconds", "token"]
            var frames = ""
            for index in 0..<600 {
                var args: [String: JSONValue] = [:]
                for _ in 0..<Int.random(in: 0...4, using: &generator) {
                    args[fields.randomElement(using: &generator)!] = .random(depth: 2, using: &generator)
                }
                if Bool.random(using: &generator) {
                    args["options"] = .object(Dictionary(uniqueKeysWithValues: ["priority", "maxAttempts", "delaySeconds", "queue"]
                        .map { ($0, JSONValue.random(depth: 0, using: &generator)) }))
                }
                let op = ops.randomElement(using: &generator)!
                // A wait on a job that exists would last its whole timeout.
                if op == "wait" { args["timeoutMs"] = .number(Double(Int.random(in: 0...50, using: &generator))) }
                let frame: JSONValue = .object(["id": .number(Double(index)), "op": .string(op), "args": .object(args)])
                frames += frame.jsonText + "\n"
            }
            let answered = try await dispatcher.withRawConnection(.unix) { raw in
                try await raw.greeting()
                try await raw.send(frames)
                var answered = 0
                while answered < 600, let frame = try await raw.next() {
                    if frame["type"] == .string("response") { answered += 1 }
                }
                return answered
            }
            #expect(answered == 600)
            let client = try await dispatcher.client(.tcp)
            #expect(try await client.ping().pong)
            await client.close()
        }
    }
}

extension JSONValue {
    static func random(depth: Int, using generator: inout some RandomNumberGenerator) -> JSONValue {
        let extremes: [Double] = [0, -1, 1, 1e300, -1e300, 9_007_199_254_740_992, Double(Int64.max), 0.5, 2_147_483_648]
        let strings = ["", "drill.noop", "image.normalize", "../x", "a\u{0}b", "garment", "body", String(repeating: "é", count: 300)]
        switch Int.random(in: 0...(depth > 0 ? 6 : 4), using: &generator) {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &generator))
        case 2: return .number(extremes.randomElement(using: &generator)!)
        case 3: return .number(Double(Int.random(in: -5...1_000_000, using: &generator)))
        case 4: return .string(strings.randomElement(using: &generator)!)
        case 5: return .array((0..<3).map { _ in random(depth: depth - 1, using: &generator) })
        default: return .object(["a": random(depth: depth - 1, using: &generator), "kind": random(depth: depth - 1, using: &generator)])
        }
    }
}
