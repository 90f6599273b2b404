import FleetSupport
import Foundation
import Tracing

/// A claimed job's part of its trace, continuing the enqueueing span kept in the row: a
/// `queue wait` span from the enqueue to the claim, then `job run` around the attempt.
enum JobSpans {
    /// Runs `body` in the job's `job run` span, after recording its queue wait; `body` returns how
    /// the attempt ended, kept as the span's outcome.
    static func run(_ job: ClaimedJob, claimedAt: Date, _ body: () async -> JobOutcome.Kind?) async {
        let parent = TracePropagation.context(continuing: job.traceParent)
        let wait = startSpan("queue wait", at: WallInstant(job.createdAt), context: parent, ofKind: .consumer)
        wait.attributes[TraceAttribute.kind] = job.kind.rawValue
        wait.attributes[TraceAttribute.jobID] = job.id
        wait.attributes[TraceAttribute.attempt] = job.attempt
        // Clocks differ between the database and this host: the wait never ends before it started.
        wait.end(at: WallInstant(max(claimedAt, job.createdAt)))
        await withSpan("job run", context: parent, ofKind: .consumer) { span in
            span.attributes[TraceAttribute.kind] = job.kind.rawValue
            span.attributes[TraceAttribute.jobID] = job.id
            span.attributes[TraceAttribute.attempt] = job.attempt
            let outcome = await body()
            span.attributes[TraceAttribute.outcome] = outcome.map(Self.label) ?? "abandoned"
            if case .dead(let error, _)? = outcome { span.setStatus(SpanStatus(code: .error, message: error)) }
        }
    }

    private static func label(_ outcome: JobOutcome.Kind) -> String {
        switch outcome {
        case .completed: "completed"
        case .retry: "retry"
        case .dead: "dead"
        case .cancelled: "cancelled"
        case .returned: "returned"
        }
    }
}

/// A wall-clock time as a span's start or end: the enqueue time comes from the job row.
struct WallInstant: TracerInstant {
    let nanosecondsSinceEpoch: UInt64

    init(_ date: Date) { nanosecondsSinceEpoch = UInt64(max(0, date.timeIntervalSince1970) * 1_000_000_000) }

    static func < (lhs: Self, rhs: Self) -> Bool { lhs.nanosecondsSinceEpoch < rhs.nanosecondsSinceEpoch }
}
