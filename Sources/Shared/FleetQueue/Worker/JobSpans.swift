import FleetSupport
import Foundation
import Tracing

/// A claimed job's part of its trace, continuing the enqueueing span kept in the row: a
/// `queue wait` span from the enqueue to the claim, then `job run` around the attempt.
///
/// Sampling comes before the spans: a job whose trace was not sampled (the sampled flag of its
/// traceparent is off) runs as with tracing off, no span made, no context bound; a sampled one
/// gets all of them. A job enqueued outside any trace starts its own: its `queue wait` is the
/// root, the tracer's sampler decides on it, and `job run` follows that decision.
enum JobSpans {
    /// What a job's attempt does about spans, decided before any is made.
    enum Decision: Equatable {
        /// Its trace was not sampled: no spans.
        case untraced
        /// Continue this sampled traceparent.
        case continuing(String)
        /// No trace (or an unreadable one): a new one, if the sampler takes it.
        case newTrace
    }

    /// From the traceparent alone (`00-<trace id>-<parent id>-<flags>`): no parsing into a
    /// context, no span, for the jobs that will not be traced.
    static func decision(traceParent: String?) -> Decision {
        guard let traceParent, let sampled = TracePropagation.isSampled(traceParent) else { return .newTrace }
        return sampled ? .continuing(traceParent) : .untraced
    }

    /// Runs `body` (the attempt, which returns how it ended) in the job's spans when its trace is
    /// sampled, or bare.
    static func run(_ job: ClaimedJob, claimedAt: Date, tracer: any Tracer, _ body: () async -> JobOutcome.Kind?) async {
        let parent: ServiceContext
        switch decision(traceParent: job.traceParent) {
        case .untraced:
            _ = await body()
            return
        case .continuing(let traceParent):
            parent = TracePropagation.context(continuing: traceParent)
        case .newTrace:
            parent = .topLevel
        }
        let wait = tracer.startSpan("queue wait", context: parent, ofKind: .consumer, at: WallInstant(job.createdAt))
        guard wait.isRecording else {
            // A new trace the sampler dropped.
            wait.end()
            _ = await body()
            return
        }
        wait.attributes = attributes(of: job)
        // Clocks differ between the database and this host: the wait never ends before it started.
        wait.end(at: WallInstant(max(claimedAt, job.createdAt)))
        // A continued trace's run is the wait's sibling, under the enqueue; a new one's follows the wait.
        let runParent = job.traceParent == nil ? wait.context : parent
        await tracer.withSpan("job run", context: runParent, ofKind: .consumer) { span in
            span.attributes = attributes(of: job)
            let outcome = await body()
            span.attributes[TraceAttribute.outcome] = outcome.map(Self.label) ?? "abandoned"
            if case .dead(let error, _)? = outcome { span.setStatus(SpanStatus(code: .error, message: error)) }
        }
    }

    /// The job's attributes, set on a span at once: each `span.attributes[…] = …` reads the
    /// span's attributes and writes them back, a copy each with a recording tracer.
    private static func attributes(of job: ClaimedJob) -> SpanAttributes {
        var attributes: SpanAttributes = [:]
        attributes.reserveCapacity(4)  // and the run's outcome
        attributes[TraceAttribute.kind] = job.kind.rawValue
        attributes[TraceAttribute.jobID] = job.id
        attributes[TraceAttribute.attempt] = job.attempt
        return attributes
    }

    private static func label(_ outcome: JobOutcome.Kind) -> String {
        switch outcome {
        case .completed: "completed"
        case .retry: "retry"
        case .dead: "dead"
        case .cancelled: "cancelled"
        case .returned: "returned"
        case .deferred, .runAfter: "deferred"
        }
    }
}

/// A wall-clock time as a span's start or end: the enqueue time comes from the job row.
struct WallInstant: TracerInstant {
    let nanosecondsSinceEpoch: UInt64

    init(_ date: Date) { nanosecondsSinceEpoch = UInt64(max(0, date.timeIntervalSince1970) * 1_000_000_000) }

    static func < (lhs: Self, rhs: Self) -> Bool { lhs.nanosecondsSinceEpoch < rhs.nanosecondsSinceEpoch }
}
