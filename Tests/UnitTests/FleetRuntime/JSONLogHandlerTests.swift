@testable import FleetRuntime
import Foundation
import Logging
import Testing

@Suite struct JSONLogHandlerTests {
    @Test func linesAreOneJSONObjectWithMetadataAtTheTopLevel() throws {
        var handler = JSONLogHandler(label: "render-worker", level: .info)
        handler[metadataKey: "worker_id"] = "w1"
        let event = LogEvent(level: .warning, message: "job \"7\" failed\nretrying", metadata: ["job_id": "7", "worker_id": "w2"],
                             source: nil, file: #fileID, function: #function, line: #line)
        let line = handler.line(for: event, at: "2026-11-22T00:00:00.000Z")
        #expect(line.hasSuffix("}\n") && line.filter { $0 == "\n" }.count == 1)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String])
        #expect(object == [
            "ts": "2026-11-22T00:00:00.000Z", "level": "warning", "msg": "job \"7\" failed\nretrying",
            "logger": "render-worker", "job_id": "7", "worker_id": "w2",
        ])
    }

    @Test func controlCharactersAreEscapedAndReadBack() throws {
        let handler = JSONLogHandler(label: "dispatcher", level: .info)
        let message = "tab\there, bell\u{7}, nul\u{0}, return\r, back\\slash, é"
        let event = LogEvent(level: .info, message: "\(message)", metadata: [:], source: nil, file: #fileID, function: #function, line: #line)
        let line = handler.line(for: event, at: "t")
        #expect(line.contains(#""msg":"tab\there, bell\u0007, nul\u0000, return\r, back\\slash, é""#))
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String])
        #expect(object["msg"] == message)
    }

    /// Inside a span, the provider (tracing's) adds the span's ids; the handler's and the event's
    /// own metadata win over it.
    @Test func aMetadataProvidersFieldsComeUnderTheHandlersAndTheEvents() throws {
        var handler = JSONLogHandler(label: "dispatcher", level: .info, metadataProvider: .init {
            ["trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7", "kind": "provided"]
        })
        handler[metadataKey: "kind"] = "handler"
        let event = LogEvent(level: .info, message: "enqueued", metadata: ["job_id": "7"], source: nil, file: #fileID, function: #function, line: #line)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(handler.line(for: event, at: "t").utf8)) as? [String: String])
        #expect(object["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736" && object["span_id"] == "00f067aa0ba902b7")
        #expect(object["kind"] == "handler" && object["job_id"] == "7")
    }
}
