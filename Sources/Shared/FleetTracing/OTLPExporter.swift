import FleetHTTPClient
import Foundation
import Logging
import ServiceLifecycle
import Tracing

/// Sends the buffered spans to the collector over OTLP/HTTP, as a service of the process
/// (`FleetProcess.run` runs it first, so it stops last, after the drain): every schedule delay,
/// or as soon as a batch is buffered, in batches of at most `maxExportBatchSize`. On graceful
/// shutdown it sends what is left, within the export timeout. A failed export is logged (logger
/// `otel`) and its batch dropped: traces are not worth holding the process back.
public struct OTLPExporter: Service {
    public let configuration: TracingConfiguration
    public let buffer: SpanBuffer
    private let client: any HTTPClient
    private let logger: Logger

    public init(configuration: TracingConfiguration, buffer: SpanBuffer, client: any HTTPClient, logger: Logger) {
        self.configuration = configuration
        self.buffer = buffer
        self.client = client
        self.logger = logger
    }

    public func run() async throws {
        // Outside any span: the client would otherwise send the current traceparent with the
        // export (and an export must not itself be traced).
        await ServiceContext.withValue(nil) {
            var lastDropWarning: ContinuousClock.Instant?
            await withGracefulShutdownHandler {
                while !buffer.isFinishing && !Task.isCancelled {
                    await buffer.wait(atMost: configuration.scheduleDelay)
                    await exportBuffered(until: nil)
                    // At most one warning an interval; the count adds up until it is said.
                    if lastDropWarning.map({ $0.duration(to: .now) >= configuration.scheduleDelay }) ?? true {
                        if warnOfDroppedSpans() { lastDropWarning = .now }
                    }
                }
            } onGracefulShutdown: {
                buffer.finish()
            }
            await exportBuffered(until: .now + configuration.timeout)
            _ = warnOfDroppedSpans()
        }
    }

    /// Sends batches until the buffer is empty, or `deadline` passes (what is left is dropped).
    func exportBuffered(until deadline: ContinuousClock.Instant?) async {
        while buffer.count > 0 {
            if let deadline, deadline <= .now {
                let left = buffer.count
                logger.warning("trace export timed out at shutdown: spans dropped", metadata: ["spans": "\(left)"])
                return
            }
            let batch = buffer.takeBatch()
            let timeout = deadline.map { min(configuration.timeout, ContinuousClock.now.duration(to: $0)) } ?? configuration.timeout
            await send(batch, timeout: timeout)
        }
    }

    private func send(_ batch: [SpanRecord], timeout: Duration) async {
        let body = OTLPTraceRequest(resource: configuration.resource, spans: batch).encoded(as: configuration.format)
        let request = HTTPClientRequest(
            method: .post, url: configuration.tracesURL,
            headers: [("Content-Type", configuration.format.contentType)] + configuration.headers,
            body: body, timeout: timeout, maxResponseBytes: 1 << 20)
        do {
            let response = try await client.execute(request)
            guard response.isSuccess else {
                logger.warning("trace export refused by the collector: spans dropped", metadata: [
                    "status": "\(response.status)", "spans": "\(batch.count)",
                    "response": "\(String(decoding: response.body.prefix(200), as: UTF8.self))",
                ])
                return
            }
            logger.debug("traces exported", metadata: ["spans": "\(batch.count)", "bytes": "\(body.count)"])
        } catch {
            logger.warning("trace export failed (collector unreachable?): spans dropped", metadata: ["error": "\(error)", "spans": "\(batch.count)"])
        }
    }

    /// Whether it warned of spans dropped by a full buffer since the last warning.
    private func warnOfDroppedSpans() -> Bool {
        let dropped = buffer.takeDropped()
        guard dropped > 0 else { return false }
        logger.warning("trace buffer full (OTEL_BSP_MAX_QUEUE_SIZE): spans dropped", metadata: [
            "spans": "\(dropped)", "max_queue_size": "\(buffer.capacity)",
        ])
        return true
    }
}
