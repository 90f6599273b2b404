import FleetSupport
import Foundation
import Logging
import Synchronization

/// One JSON object per line on standard error: `ts`, `level`, `msg`, `logger`, then the
/// metadata (`job_id`, `worker_id`…, and inside a span `trace_id`, `span_id` from the metadata
/// provider) as top-level string fields.
public struct JSONLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    public var logLevel: Logger.Level
    private let label: String

    public init(label: String, level: Logger.Level, metadataProvider: Logger.MetadataProvider? = nil) {
        self.label = label
        self.logLevel = level
        self.metadataProvider = metadataProvider
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        StandardError.write(line(for: event, at: timestamp()))
    }

    /// One log line: `ts`, `level`, `msg`, `logger`, then the metadata, event's over handler's
    /// over the provider's.
    func line(for event: LogEvent, at timestamp: String) -> String {
        var line = "{\"ts\":\"\(timestamp)\",\"level\":\"\(event.level.rawValue)\",\"msg\":\(quoted(event.message.description)),\"logger\":\(quoted(label))"
        let provided = metadataProvider?.get() ?? [:]
        let merged = provided.merging(metadata) { _, new in new }.merging(event.metadata ?? [:]) { _, new in new }
        for (key, value) in merged.sorted(by: { $0.key < $1.key }) {
            line += ",\(quoted(key)):\(quoted(value.description))"
        }
        if let error = event.error, merged["error"] == nil { line += ",\"error\":\(quoted("\(error)"))" }
        return line + "}\n"
    }

    private func timestamp() -> String {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        var parts = tm()
        var seconds = time.tv_sec
        gmtime_r(&seconds, &parts)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday,
                      parts.tm_hour, parts.tm_min, parts.tm_sec, time.tv_nsec / 1_000_000)
    }
}

/// A JSON string literal for `text`.
func quoted(_ text: String) -> String {
    var literal: [UInt8] = []
    literal.appendJSONString(text)
    return String(decoding: literal, as: UTF8.self)
}

/// Whole-line writes to standard error, so lines from many tasks never interleave.
enum StandardError {
    private static let lock = Mutex(())

    static func write(_ text: String) {
        lock.withLock { _ in
            var bytes = Array(text.utf8)
            var offset = 0
            while offset < bytes.count {
                let written = bytes.withUnsafeMutableBytes { Foundation.write(2, $0.baseAddress! + offset, $0.count - offset) }
                if written <= 0 { return }
                offset += written
            }
        }
    }
}

public enum FleetLogging {
    /// Installs the process-wide log handler once, from the settings; `metadataProvider` adds
    /// the current span's ids when tracing is on.
    public static func bootstrap(format: FleetSettings.LogFormat, level: Logger.Level, metadataProvider: Logger.MetadataProvider? = nil) {
        LoggingSystem.bootstrap({ label, provider in
            switch format {
            case .json: return JSONLogHandler(label: label, level: level, metadataProvider: provider)
            case .text:
                var handler = StreamLogHandler.standardError(label: label, metadataProvider: provider)
                handler.logLevel = level
                return handler
            }
        }, metadataProvider: metadataProvider)
    }
}
