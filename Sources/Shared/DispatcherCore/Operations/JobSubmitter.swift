import DispatcherProtocol
import FleetCallbacks
import FleetQueue
import FleetStorage
import FleetSupport
import Foundation

/// Enqueues one job for the enqueueing ops, turning the protocol's options into the queue's.
struct JobSubmitter: Sendable {
    let enqueuer: any JobEnqueuer
    /// What a `callbackUrl` and an `http.request` are checked against.
    let outbound: OutboundSettings

    /// Longest `delaySeconds`: far beyond any use, and well inside what a `Duration` holds.
    static let maxDelaySeconds = 366.0 * 86_400

    func submit(kind: JobKind, payload: some Encodable, options: JobOptions?) async throws -> EnqueuedJobResult {
        let enqueued = try await enqueuer.enqueue(try job(kind: kind, payload: payload, options: options, field: "args"))
        return EnqueuedJobResult(jobId: enqueued.id, kind: kind.rawValue, isNew: enqueued.isNew)
    }

    /// The job the options make, checked by the queue's rules (`NewJob.validate`); `field`: where
    /// the client wrote it (`args`, or a graph's `args.jobs[3]`), and `afterField` where its `after`
    /// ids are (a graph node's own `after`), for errors.
    func job(kind: JobKind, payload: some Encodable, options: JobOptions?, field: String, afterField: String? = nil) throws -> NewJob {
        let options = options ?? JobOptions()
        let delay = options.delaySeconds ?? 0
        guard (0...Self.maxDelaySeconds).contains(delay) else {
            throw DispatcherError(.badArgument, "\(field).options.delaySeconds must be between 0 and \(Int(Self.maxDelaySeconds))")
        }
        // Text parameters travel to libpq as C strings: a NUL would cut them short, silently.
        for (name, text) in [("kind", kind.rawValue), ("options.queue", options.queue), ("options.idempotencyKey", options.idempotencyKey)] {
            if let text, text.utf8.contains(0) { throw DispatcherError(.badArgument, "\(field).\(name) must not contain NUL") }
        }
        let defaults = NewJob(kind: kind)
        var job = NewJob(
            kind: kind, payload: try Self.payloadText(payload), queue: options.queue ?? defaults.queue,
            priority: options.priority ?? defaults.priority, delay: .milliseconds(Int64((delay * 1000).rounded())),
            maxAttempts: options.maxAttempts ?? defaults.maxAttempts, idempotencyKey: options.idempotencyKey)
        job.limitKeys = options.limitKeys ?? []
        job.after = options.after ?? []
        if let url = options.callbackUrl {
            do { _ = try outbound.policy.destination(of: url) } catch {
                throw DispatcherError(.badArgument, "\(field).options.callbackUrl: \(error)")
            }
            job.callbackURL = url
        }
        do {
            try job.validate()
        } catch QueueError.invalidJob(let checked, let reason) {
            let path = switch checked {
            case .payload: "\(field).payload"
            case .delay: "\(field).options.delaySeconds"
            case .after: afterField ?? "\(field).options.after"
            default: "\(field).options.\(checked.rawValue)"
            }
            throw DispatcherError(.badArgument, "\(path) \(reason)")
        }
        return job
    }
}

extension JobSubmitter {
    /// The payload's JSON text. A client's parsed payload (`enqueue`'s) is written by hand:
    /// `JSONEncoder`, made for each job, took 14 % of a single enqueue's instructions
    /// (`docs/benchmarks.md`, "Single enqueues"). The column is jsonb, which keeps numbers as
    /// written: they are written as the encoder writes them.
    static func payloadText(_ payload: some Encodable) throws -> String {
        if let fields = payload as? [String: JSONValue] {
            var bytes: [UInt8] = []
            bytes.reserveCapacity(64)
            if appendEncoded(.object(fields), to: &bytes) { return String(decoding: bytes, as: UTF8.self) }
        }
        return String(decoding: try JSONEncoder().encode(payload), as: UTF8.self)
    }

    /// Appends `value` as `JSONEncoder` would; false for a number it refuses (not finite).
    private static func appendEncoded(_ value: JSONValue, to bytes: inout [UInt8]) -> Bool {
        switch value {
        case .null: bytes.append(contentsOf: "null".utf8)
        case .bool(let flag): bytes.append(contentsOf: flag ? "true".utf8 : "false".utf8)
        case .number(let number):
            guard number.isFinite else { return false }
            // The shortest text that reads back as the same double, whole numbers without ".0".
            let text = number.description
            bytes.append(contentsOf: text.hasSuffix(".0") ? text.dropLast(2).utf8 : text[...].utf8)
        case .string(let text): bytes.appendJSONString(text)
        case .array(let items):
            bytes.append(UInt8(ascii: "["))
            for (index, item) in items.enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                guard appendEncoded(item, to: &bytes) else { return false }
            }
            bytes.append(UInt8(ascii: "]"))
        case .object(let fields):
            bytes.append(UInt8(ascii: "{"))
            for (index, (key, item)) in fields.enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                bytes.appendJSONString(key)
                bytes.append(UInt8(ascii: ":"))
                guard appendEncoded(item, to: &bytes) else { return false }
            }
            bytes.append(UInt8(ascii: "}"))
        }
        return true
    }
}

/// The storage id a typed op's field must be, refused as a bad argument before anything is enqueued.
func storageID(_ value: String, field: String) throws -> StorageID {
    do {
        return try StorageID(value)
    } catch {
        throw DispatcherError(.badArgument, "args.\(field) must be 1 to 64 characters of A-Z a-z 0-9 _ -")
    }
}
