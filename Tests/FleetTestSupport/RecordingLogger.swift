import Logging
import Synchronization

/// A logger whose lines (every level) are kept in memory, for a test to show what a component
/// it runs in-process said when the test fails.
final class LogRecord: Sendable {
    private let lines = Mutex<[String]>([])

    var logger: Logger {
        var logger = Logger(label: "recorded") { _ in Handler(record: self) }
        logger.logLevel = .trace
        return logger
    }

    /// How many lines contain `text`.
    func count(_ text: String) -> Int { lines.withLock { $0.filter { $0.contains(text) }.count } }

    /// The last `count` lines.
    func last(_ count: Int) -> String { lines.withLock { $0.suffix(count).joined(separator: "\n") } }

    fileprivate func append(_ line: String) { lines.withLock { $0.append(line) } }

    private struct Handler: LogHandler {
        let record: LogRecord
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let fields = metadata.merging(event.metadata ?? [:]) { $1 }.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
            record.append("\(ContinuousClock.now) \(event.level) \(event.message) \(fields.joined(separator: " "))")
        }
    }
}
