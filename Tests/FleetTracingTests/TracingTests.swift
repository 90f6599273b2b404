@testable import DispatcherProtocol
import FakeProviders
import FleetHTTPClient
import FleetSupport
@testable import FleetTestSupport
import Foundation
@testable import Providers
@testable import Renders
import Testing

/// The `traceparent` field of request frames: what the client sends, what the server accepts.
@Suite(.timeLimit(.minutes(3))) struct TraceParentTests {
    static let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    /// What a reader of the frame decodes the field into.
    struct Carried: Decodable {
        let traceparent: TraceParent
    }

    @Test func aTraceparentRoundTripsThroughTheFrame() async throws {
        let parent = try TraceParent(Self.valid)
        let frame = try WireFormat.makeEncoder().encode(RequestFrame(id: .number(7), args: PingRequest(), traceparent: parent))
        let sent = try JSONValue(json: String(decoding: frame, as: UTF8.self))
        #expect(sent["traceparent"] == .string(Self.valid))
        #expect(try WireFormat.makeDecoder().decode(Carried.self, from: frame).traceparent == parent)
        #expect(parent.traceID == "4bf92f3577b34da6a3ce929d0e0e4736")
        // Without one, the frame has no such field at all.
        let plain = try WireFormat.makeEncoder().encode(RequestFrame(id: .number(8), args: PingRequest()))
        #expect(try JSONValue(json: String(decoding: plain, as: UTF8.self))["traceparent"] == nil)

        try await TestDispatcher.run { dispatcher in
            let client = try await dispatcher.client()
            _ = try await client.send(PingRequest(), traceparent: parent)
            await client.close()
            try await dispatcher.withRawConnection(.unix) { raw in
                try await raw.greeting()
                try await raw.send(#"{"id":1,"op":"ping","traceparent":"\#(Self.valid)"}"# + "\n" + #"{"id":2,"op":"ping","traceparent":null}"# + "\n")
                let answers = [try await raw.response(), try await raw.response()]
                #expect(answers.allSatisfy { $0["ok"] == .bool(true) })
            }
        }
    }

    @Test func aMalformedTraceparentIsRefusedWithAClearError() async throws {
        let cases: [(text: String, reason: String)] = [
            ("00-4bf92f3577b34da6a3ce929d0e0e4736", "4 fields separated by '-'"),
            ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "version must be 00"),
            ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "the trace id is 32 lowercase hex digits"),
            ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", "the trace id must not be all zeros"),
            ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba9-01", "the parent id is 16 lowercase hex digits"),
            ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "the parent id must not be all zeros"),
            ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1", "the flags are 2 lowercase hex digits"),
        ]
        for item in cases {
            #expect(throws: TraceParent.FormatError(text: item.text, reason: item.reason)) { try TraceParent(item.text) }
            #expect(throws: DecodingError.self) { try WireFormat.makeDecoder().decode(Carried.self, from: Data(#"{"traceparent":"\#(item.text)"}"#.utf8)) }
        }
        #expect(TraceParent.FormatError(text: "x", reason: "4 fields separated by '-'").description
            == "traceparent 'x' is not a W3C traceparent (00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>): 4 fields separated by '-'")

        try await TestDispatcher.run { dispatcher in
            try await dispatcher.withRawConnection(.unix) { raw in
                try await raw.greeting()
                try await raw.send(#"{"id":1,"op":"enqueue","args":{"kind":"drill.noop"},"traceparent":"00-zz-00f067aa0ba902b7-01"}"# + "\n")
                let refused = try await raw.response()
                #expect(refused.errorCode == "BAD_ARGUMENT")
                #expect(refused["error"]?["message"] == .string(TraceParent.FormatError(text: "00-zz-00f067aa0ba902b7-01", reason: "the trace id is 32 lowercase hex digits").description))
                try await raw.send(#"{"id":2,"op":"ping","traceparent":42}"# + "\n")
                let wrongType = try await raw.response()
                #expect(wrongType.errorCode == "BAD_ARGUMENT")
                #expect(wrongType["error"]?["message"] == .string("traceparent must be a string (a W3C traceparent) or null"))
                // The connection goes on, and nothing was enqueued.
                try await raw.send(#"{"id":3,"op":"ping"}"# + "\n")
                #expect(try await raw.response()["ok"] == .bool(true))
            }
            #expect(try await dispatcher.queue.pool.query("SELECT count(*) AS n FROM jobs").rows[0].int("n") == 0)
        }
    }
}

/// One render's trace across real processes: `render.request` over the socket with the test's
/// traceparent → the `dispatcher` process (request, enqueue) → the job row → a `render-worker`
/// process (queue wait, job run, the render's steps against a fake fal) → fal's signed webhook
/// back to the dispatcher (`provider webhook`) → both export over OTLP/HTTP to a collector in the test.
@Suite(.serialized) struct TracingProcessTests {
    @Test func aRenderIsOneTraceAcrossTheDispatcherAndTheWorker() async throws {
        let fal = try await FakeFal.start(webhookClient: CurlHTTPClient())
        fal.update { $0.latency = .milliseconds(300) }
        let fixture = try await RenderFixture.make(provider: FashnProvider.name, fal: fal)
        try await fixture.grant("u1", credits: 1)
        let collector = try await FakeCollector.start()
        let tracing = [
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.baseURL, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        ]
        let socket = temporaryPath("dispatcher") + ".sock"
        let httpPort = try freePort()
        let dispatcher = try WorkerProcess(databaseURL: fixture.q.url, executable: "dispatcher", environment: tracing.merging([
            "FLEET_DISPATCHER_TCP": "off", "FLEET_DISPATCHER_SOCKET": socket, "FLEET_HTTP_ADDRESS": "127.0.0.1:\(httpPort)",
            "FLEET_FAL_JWKS_URL": fal.jwksURL, "FLEET_STORAGE_ROOT": fixture.root,
        ]) { $1 })
        // The webhook is the only way this worker learns the outcome (a grace longer than the render).
        let worker = try WorkerProcess(databaseURL: fixture.q.url, executable: "render-worker", environment: tracing.merging([
            "FAL_KEY": fal.key, "FAL_QUEUE_URL": fal.baseURL, "FLEET_STORAGE_ROOT": fixture.root,
            "FLEET_RENDER_WEBHOOK_URL": "http://127.0.0.1:\(httpPort)/webhooks/fal", "FLEET_RENDER_WEBHOOK_GRACE_MS": "60000",
            "FLEET_LOG_LEVEL": "info",
        ]) { $1 })
        defer {
            dispatcher.signal(SIGKILL)
            worker.signal(SIGKILL)
            try? FileManager.default.removeItem(atPath: fixture.root)
        }

        #expect(try await ChildProcess.run(builtExecutable("dispatcher"), ["ping", "--dispatcher", socket, "--wait", "60"]) == 0)
        let client = try await DispatcherClient.connect(to: .unix(path: socket))
        let caller = try TraceParent("00-\(String(repeating: "ab", count: 16))-\(String(repeating: "cd", count: 8))-01")
        _ = try await client.send(
            RequestRenderRequest(renderId: "r-trace", userId: "u1", garmentId: "g1", bodyPhotoId: "b1", category: "tops"), traceparent: caller)
        let waited = try await client.send(WaitRenderRequest(renderId: "r-trace", timeoutMs: 30_000))
        #expect(waited.render.status == .complete, "dispatcher log: \(dispatcher.log)\nworker log: \(worker.log)")
        await client.close()

        let traceID = String(caller.traceID)
        // Each process exports its spans as they end, in batches: `job run` ends after its steps
        // and `request` after `enqueue`, so wait for every one.
        let expected: Set = [
            "request render.request", "enqueue", "queue wait", "job run", "provider submit", "provider wait", "download", "store", "settle",
            "provider webhook",
        ]
        let collected = try await collector.spans(within: .seconds(20)) { spans in
            expected.isSubset(of: Set(spans.filter { $0.traceID == traceID }.map(\.name)))
        }
        let spans = try #require(collected, "spans: \(collector.spans)\ndispatcher log: \(dispatcher.log)\nworker log: \(worker.log)")
            .filter { $0.traceID == traceID }
        func span(_ name: String) throws -> CollectedSpan { try #require(spans.first { $0.name == name }, "no \(name) among \(spans.map(\.name))") }

        // One trace, from both processes, under the caller's span.
        #expect(Set(spans.map(\.service)) == ["dispatcher", "render-worker"])
        let request = try span("request render.request"), enqueue = try span("enqueue")
        let wait = try span("queue wait"), run = try span("job run")
        #expect(request.service == "dispatcher" && request.parentSpanID == String(caller.rawValue.split(separator: "-")[2]))
        #expect(enqueue.service == "dispatcher" && enqueue.parentSpanID == request.spanID)
        #expect(wait.service == "render-worker" && wait.parentSpanID == enqueue.spanID && run.parentSpanID == enqueue.spanID)
        #expect(run.attributes["job.kind"] == "render.run" && run.attributes["job.attempt"] == "1" && run.attributes["outcome"] == "completed")
        #expect(run.attributes["job.id"] == enqueue.attributes["job.id"] && wait.attributes["job.id"] == enqueue.attributes["job.id"])
        for step in ["provider submit", "provider wait", "download", "store", "settle"] {
            let child = try span(step)
            #expect(child.service == "render-worker" && child.parentSpanID == run.spanID, "\(step)")
            #expect(child.attributes["render.id"] == "r-trace" && child.attributes["render.provider"] == FashnProvider.name, "\(step)")
        }
        #expect(try span("settle").attributes["outcome"] == "complete")
        // fal's webhook, received by the dispatcher, under the submit that gave fal its URL.
        let webhook = try span("provider webhook")
        #expect(try webhook.service == "dispatcher" && webhook.parentSpanID == span("provider submit").spanID)
        #expect(webhook.attributes["outcome"] == "200" && webhook.attributes["render.provider"] == "fal")

        // In order: the wait starts no earlier than the enqueue, the run once the wait ended.
        #expect(request.start <= enqueue.start && enqueue.start <= wait.start && wait.start <= wait.end && wait.end <= run.start)
        #expect(try span("provider submit").end <= span("provider wait").start)
        #expect(try span("provider submit").end <= webhook.start && span("provider wait").start <= webhook.start)
        #expect(try span("download").end <= span("store").start && span("store").end <= span("settle").start)

        // fal was called inside the submit span, and said so.
        let submit = try #require(fal.requests.first { $0.method == "POST" })
        #expect(submit.headers["traceparent"] == "00-\(traceID)-\(try span("provider submit").spanID)-01")
        // The worker's log lines inside the trace name it.
        let completeLine = try #require(worker.log.split(separator: "\n").first { $0.contains("\"render complete\"") })
        #expect(completeLine.contains("\"trace_id\":\"\(traceID)\"") && completeLine.contains("\"span_id\":\""))

        dispatcher.signal(SIGTERM)
        worker.signal(SIGTERM)
        #expect(await dispatcher.wait() == 0)
        #expect(await worker.wait() == 0)
        await collector.stop()
        await fal.stop()
    }
}
