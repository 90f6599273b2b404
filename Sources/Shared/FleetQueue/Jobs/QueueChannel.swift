import FleetPostgres
import Foundation

/// The queue's NOTIFY channels, each with its payload. Notifications are hints; pollers are the
/// guarantee. `docs/schema.md` ("NOTIFY channels") lists them with their senders.
public enum QueueChannel {
    /// A job kind that has new work (sent by the enqueue statement and by triggers, whose SQL
    /// builds the payload: `notifySQL(payload:)` with the kind's text).
    public static let jobs = NotificationTopic<JobKind>("fleet_jobs", encode: \.rawValue, decode: { JobKind(rawValue: $0) })
    /// Operators' requests to the workers (`QueueControl`), as JSON.
    public static let control = NotificationTopic<QueueControl>("fleet_control", encode: { $0.payload }, decode: QueueControl.init(payload:))
    /// Comma-separated ids of jobs that reached a terminal state (`completed`, `dead`,
    /// `cancelled`), at most `finishedIDsPerNotification` per notification; built by SQL
    /// (`PostgresQueueDriver.notifyFinished(from:)`).
    public static let finished = NotificationTopic<[Int64]>(
        "fleet_jobs_finished",
        encode: { $0.map(String.init).joined(separator: ",") },
        decode: { text in
            let ids = text.split(separator: ",", omittingEmptySubsequences: false).map { Int64($0) }
            return ids.isEmpty || ids.contains(nil) ? nil : ids.compactMap { $0 }
        })
    /// Keeps a payload of bigint ids well under NOTIFY's 8000-byte limit.
    public static let finishedIDsPerNotification = 300
}

/// What `QueueChannel.control` carries, as JSON: `{"action":"cancel","jobId":42,"owner":"w-1"}`
/// (the owner absent when the job had none), `{"action":"limits"}` or `{"action":"pauses"}`. Decoded once, by its
/// topic; anything else decodes to nil, which receivers log and ignore. The text form of the
/// release before (`cancel 42 w-1`, `limits`) is still read, for the rolling upgrade
/// (`docs/operations.md`).
public enum QueueControl: Sendable, Hashable {
    /// Stop the running job `jobID`; only its owner (the worker holding its lease) acts on it.
    case cancel(jobID: Int64, owner: String?)
    /// The fleet-wide limits changed: workers of limited kinds claim again.
    case limits
    /// A kind or a queue was paused or resumed: render admission reads the pauses again.
    case pauses

    /// The JSON form, its keys the protocol's (`docs/protocol.md`).
    private struct Wire: Codable {
        var action: String
        var jobId: Int64?
        var owner: String?
    }

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    /// Its JSON.
    var payload: String {
        let wire = switch self {
        case .cancel(let jobID, let owner): Wire(action: "cancel", jobId: jobID, owner: owner)
        case .limits: Wire(action: "limits")
        case .pauses: Wire(action: "pauses")
        }
        // A struct of a string, an integer and a string always encodes.
        return (try? Self.encoder.encode(wire)).map { String(decoding: $0, as: UTF8.self) } ?? #"{"action":"limits"}"#
    }

    /// Nil for a shape it does not know.
    init?(payload: String) {
        guard payload.hasPrefix("{") else {
            self.init(legacy: payload)
            return
        }
        guard let wire = try? JSONDecoder().decode(Wire.self, from: Data(payload.utf8)) else { return nil }
        switch (wire.action, wire.jobId) {
        case ("cancel", let jobID?): self = .cancel(jobID: jobID, owner: wire.owner)
        case ("limits", nil): self = .limits
        case ("pauses", nil): self = .pauses
        default: return nil
        }
    }

    /// The text form of the release before: `cancel <jobId> <owner>` (`-` for none), `limits`.
    private init?(legacy payload: String) {
        if payload == "limits" {
            self = .limits
            return
        }
        let words = payload.split(separator: " ", omittingEmptySubsequences: false)
        guard words.count == 3, words[0] == "cancel", let jobID = Int64(words[1]), !words[2].isEmpty else { return nil }
        self = .cancel(jobID: jobID, owner: words[2] == "-" ? nil : String(words[2]))
    }
}
