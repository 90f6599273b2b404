import Synchronization

/// The finished spans waiting for the exporter (OpenTelemetry's batch span processor, without a
/// task of its own): an ended span is appended under a lock, with no task woken, except the one
/// append that completes a batch, which wakes the exporter early. Beyond `capacity` new spans
/// are dropped and counted, as `OTEL_BSP_MAX_QUEUE_SIZE` says.
public final class SpanBuffer: Sendable {
    public let capacity: Int
    public let batchSize: Int
    private let state = Mutex(State())

    private struct State {
        var spans: [SpanRecord] = []
        var dropped = 0
        /// The exporter's wait, cancelled to wake it.
        var wait: Task<Void, Never>?
        /// Set at shutdown: the exporter waits no more.
        var finishing = false
    }

    public init(capacity: Int, batchSize: Int) {
        self.capacity = max(capacity, 1)
        self.batchSize = min(max(batchSize, 1), self.capacity)
    }

    func append(_ span: SpanRecord) {
        let wake = state.withLock { state -> Task<Void, Never>? in
            guard state.spans.count < capacity else {
                state.dropped += 1
                return nil
            }
            state.spans.append(span)
            return state.spans.count >= batchSize ? state.wait.take() : nil
        }
        wake?.cancel()
    }

    public var count: Int { state.withLock { $0.spans.count } }

    /// Up to `batchSize` of the oldest spans, taken out.
    public func takeBatch() -> [SpanRecord] {
        state.withLock { state in
            guard state.spans.count > batchSize else { return state.spans.take() }
            let batch = Array(state.spans.prefix(batchSize))
            state.spans.removeFirst(batchSize)
            return batch
        }
    }

    /// The spans dropped since the last call.
    public func takeDropped() -> Int {
        state.withLock { state in
            defer { state.dropped = 0 }
            return state.dropped
        }
    }

    /// Returns after `delay`, or sooner once a batch is buffered, `wake` is called, the buffer is
    /// finishing or the task is cancelled.
    public func wait(atMost delay: Duration) async {
        let sleep = Task<Void, Never> { try? await Task.sleep(for: delay) }
        let now = state.withLock { state in
            if state.spans.count >= batchSize || state.finishing { return true }
            state.wait = sleep
            return false
        }
        if now { sleep.cancel() }
        await withTaskCancellationHandler { await sleep.value } onCancel: { sleep.cancel() }
        state.withLock { state in
            if state.wait == sleep { state.wait = nil }
        }
    }

    /// Whether the exporter is between exports, waiting: a span appended now goes out with the
    /// next batch or schedule, not with an export already under way.
    public var exporterIsWaiting: Bool { state.withLock { $0.wait != nil } }

    public func wake() { state.withLock { $0.wait.take() }?.cancel() }

    /// Shutdown: the exporter's waits end now and for good; spans are still taken.
    public func finish() {
        state.withLock { state in
            state.finishing = true
            return state.wait.take()
        }?.cancel()
    }

    public var isFinishing: Bool { state.withLock { $0.finishing } }
}

private extension Array {
    mutating func take() -> Self {
        defer { self = [] }
        return self
    }
}
