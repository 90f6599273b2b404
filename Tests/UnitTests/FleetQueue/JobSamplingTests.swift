@testable import FleetQueue
import Foundation
import InMemoryTracing
import Synchronization
import Testing
import Tracing

/// Sampling before spans (`JobSpans`): the sampled flag of a job's traceparent decides, before
/// any span is made, whether its attempt is traced. Over an in-memory tracer that records every
/// span it is asked for (it samples all new traces).
@Suite struct JobSamplingTests {
    static let traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
    static func traceParent(flags: String) -> String { "00-\(traceID)-00f067aa0ba902b7-\(flags)" }

    private func job(_ traceParent: String?) -> ClaimedJob {
        ClaimedJob(id: 7, kind: .drillNoop, queue: "default", priority: 2, attempt: 1, maxAttempts: 5, payload: "{}",
                   createdAt: Date(), traceParent: traceParent)
    }

    @Test func theDecisionIsTheTraceparentsSampledFlag() {
        #expect(JobSpans.decision(traceParent: Self.traceParent(flags: "01")) == .continuing(Self.traceParent(flags: "01")))
        #expect(JobSpans.decision(traceParent: Self.traceParent(flags: "03")) == .continuing(Self.traceParent(flags: "03")))
        #expect(JobSpans.decision(traceParent: Self.traceParent(flags: "00")) == .untraced)
        #expect(JobSpans.decision(traceParent: Self.traceParent(flags: "02")) == .untraced)
        #expect(JobSpans.decision(traceParent: nil) == .newTrace)
        #expect(JobSpans.decision(traceParent: "00-\(Self.traceID)-01") == .newTrace)
        #expect(JobSpans.decision(traceParent: Self.traceParent(flags: "zz")) == .newTrace)
    }

    @Test func anUnsampledJobMakesNoSpanAndASampledOneItsWholeTrace() async {
        let tracer = InMemoryTracer()
        let attempts = Atomic(0)
        let attempt = { () async -> JobOutcome.Kind? in
            attempts.add(1, ordering: .relaxed)
            return .completed(result: nil)
        }

        await JobSpans.run(job(Self.traceParent(flags: "00")), claimedAt: Date(), tracer: tracer, attempt)
        #expect(attempts.load(ordering: .relaxed) == 1)
        #expect(tracer.finishedSpans.isEmpty && tracer.activeSpans.isEmpty)

        await JobSpans.run(job(Self.traceParent(flags: "01")), claimedAt: Date(), tracer: tracer, attempt)
        #expect(attempts.load(ordering: .relaxed) == 2)
        #expect(tracer.finishedSpans.map(\.operationName) == ["queue wait", "job run"])
        #expect(tracer.finishedSpans.last?.attributes["outcome"]?.toSpanAttribute() == .string("completed"))
        tracer.clearAll()

        // No trace yet: the wait starts one, the run follows it in the same trace.
        await JobSpans.run(job(nil), claimedAt: Date(), tracer: tracer, attempt)
        let spans = tracer.finishedSpans
        #expect(spans.map(\.operationName) == ["queue wait", "job run"])
        if spans.count == 2 {
            #expect(spans[0].spanContext.parentSpanID == nil)
            #expect(spans[1].traceID == spans[0].traceID && spans[1].spanContext.parentSpanID == spans[0].spanContext.spanID)
        }
        #expect(attempts.load(ordering: .relaxed) == 3)
    }
}
