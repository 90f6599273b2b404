import DrillKinds
import FakeProviders
@testable import FleetQueue
import FleetSupport
@testable import FleetTestSupport
import FleetTracing
import Foundation
import Testing
import Tracing

/// New traces are sampled before any span is recorded (`FleetTracer`): a trace not kept makes no
/// record and reaches no buffer, a kept one is recorded whole.
@Suite struct RootSamplingTests {
    @Test func theRatioComesFromTheStandardVariables() throws {
        #expect(try TracingConfiguration.rootRatio([:]) == 1)
        #expect(try TracingConfiguration.rootRatio(["OTEL_TRACES_SAMPLER": "parentbased_always_on"]) == 1)
        #expect(try TracingConfiguration.rootRatio(["OTEL_TRACES_SAMPLER": "always_off"]) == 0)
        #expect(try TracingConfiguration.rootRatio(["OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1"]) == 0.1)
        #expect(try TracingConfiguration.rootRatio(["OTEL_TRACES_SAMPLER": "traceidratio"]) == 1)
        #expect(throws: ConfigurationError.self) {
            try TracingConfiguration.rootRatio(["OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1.5"])
        }
        #expect(throws: ConfigurationError.self) { try TracingConfiguration.rootRatio(["OTEL_TRACES_SAMPLER": "xray"]) }
    }

    @Test func theDrawKeepsItsShare() {
        for ratio in [0.0, 0.1, 0.5, 1.0] {
            let random = TraceRandom()
            let kept = (0..<20_000).filter { _ in random.draw(ratio) }.count
            // Binomial: the standard deviation at 0.5 is 71; 1,000 is more than 14 of them.
            #expect(abs(kept - Int(ratio * 20_000)) <= (ratio == 0 || ratio == 1 ? 0 : 1_000), "ratio \(ratio): kept \(kept)")
        }
        // Each tracer seeds its own sequence: ids differ across tracers as within one.
        let ids = Set((0..<1_000).map { _ in TraceRandom().traceID().hex })
        #expect(ids.count == 1_000 && ids.allSatisfy { $0.count == 32 })
    }

    /// A job without a trace, under a ratio of 0: its attempt runs bare and nothing is recorded;
    /// under 1 it gets its two spans, one trace.
    @Test func aJobNotKeptNeverReachesTheTracer() async {
        let job = ClaimedJob(id: 7, kind: .drillNoop, queue: "default", priority: 2, attempt: 1, maxAttempts: 5, payload: "{}",
                             createdAt: Date(), traceParent: nil)
        let buffer = SpanBuffer(capacity: 100, batchSize: 10)
        var ran = 0
        await JobSpans.run(job, claimedAt: Date(), tracer: FleetTracer(ratio: 0, buffer: buffer)) {
            ran += 1
            return .completed(result: nil)
        }
        #expect(ran == 1 && buffer.count == 0)

        await JobSpans.run(job, claimedAt: Date(), tracer: FleetTracer(ratio: 1, buffer: buffer)) { .completed(result: nil) }
        let spans = buffer.takeBatch()
        #expect(spans.map(\.snapshot.name) == ["queue wait", "job run"])
        #expect(Set(spans.map(\.context.traceID)).count == 1)
    }

    /// The spans under a dropped trace are dropped too, and the trace travels on as "not sampled".
    @Test func aDroppedTraceDropsItsChildrenAndTravelsAsNotSampled() {
        let buffer = SpanBuffer(capacity: 100, batchSize: 10)
        let tracer = FleetTracer(ratio: 0, buffer: buffer)
        let root = tracer.startSpan("request", context: .topLevel)
        let child = tracer.startSpan("enqueue", context: root.context)
        #expect(!root.isRecording && !child.isRecording)
        child.end()
        root.end()
        #expect(buffer.count == 0)
        let traceParent = TracePropagation.traceParent(of: child.context, by: tracer)
        #expect(traceParent.flatMap(TracePropagation.isSampled) == false, "\(String(describing: traceParent))")
    }

    /// Worker processes traced at a ratio, exporting to a collector: the share of jobs without a
    /// traceparent that reach it follows the ratio, and every job that does brings both its spans,
    /// in a trace of its own.
    @Test(arguments: [0.0, 0.5])
    func aWorkerExportsTheShareOfNewTracesItKeepsWhole(_ ratio: Double) async throws {
        let q = try await TestQueue.make()
        let collector = try await FakeCollector.start()
        defer { Task { await collector.stop() } }
        let worker = try WorkerProcess(databaseURL: q.url, environment: [
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.baseURL, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json", "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "\(ratio)",
        ])
        defer { worker.signal(SIGKILL) }
        let jobs = 400
        _ = try await q.queue.enqueue((0..<jobs).map { _ in NewJob(kind: .drillNoop) })
        try await q.waitUntil("all done") { try await q.states()[.completed] == jobs }
        // The worker's batch exporter sends every 100 ms; a marker job after the others, always
        // exported (a sampled traceparent), says the batches before it have gone out.
        var marker = NewJob(kind: .drillNoop)
        marker.traceParent = "00-\(String(repeating: "ef", count: 16))-\(String(repeating: "01", count: 8))-01"
        _ = try await q.queue.enqueue(marker)
        let collected = try await collector.spans(within: .seconds(30)) { spans in spans.contains { $0.traceID.hasPrefix("efef") } }
        try #require(collected != nil, "no marker span; worker log: \(worker.log)")
        let spans = collector.spans.filter { !$0.traceID.hasPrefix("efef") }
        let traces = Dictionary(grouping: spans, by: \.traceID)
        #expect(traces.values.allSatisfy { Set($0.map(\.name)) == ["queue wait", "job run"] && $0.count == 2 })
        // Binomial at 0.5 over 400: a standard deviation of 10; 80 is 8 of them.
        #expect(abs(traces.count - Int(ratio * Double(jobs))) <= (ratio == 0 ? 0 : 80), "kept \(traces.count) of \(jobs)")
    }
}
