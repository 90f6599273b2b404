extension NewJob {
    /// The queue's rules for a job's fields, in one place: `JobQueue` checks every job it inserts
    /// with them, before any statement. An entry point that wants a bad argument refused at its
    /// own path (a protocol op's `args.options.priority`, a graph's `args.jobs[3].after`) runs them
    /// first and maps `QueueError.invalidJob`'s field to that path; the kind is `JobQueue`'s check.
    public func validate() throws {
        guard (0...9).contains(priority) else { throw QueueError.invalidJob(field: .priority, reason: "\(priority) is outside 0...9") }
        guard maxAttempts >= 1 else { throw QueueError.invalidJob(field: .maxAttempts, reason: "must be at least 1") }
        guard delay >= .zero else { throw QueueError.invalidJob(field: .delay, reason: "must not be negative") }
        guard !queue.isEmpty, queue.utf8.count <= 64 else { throw QueueError.invalidJob(field: .queue, reason: "must be 1 to 64 bytes") }
        if let key = idempotencyKey, key.isEmpty || key.utf8.count > 255 {
            throw QueueError.invalidJob(field: .idempotencyKey, reason: "must be 1 to 255 bytes")
        }
        if !limitKeys.isEmpty { try ConcurrencyLimit.validate(jobKeys: limitKeys) }
        try Self.validate(after: after)
        // An object starts with "{"; the server checks the rest of the syntax.
        guard payload.utf8.first(where: { !isJSONWhitespace($0) }) == UInt8(ascii: "{") else {
            throw QueueError.invalidJob(field: .payload, reason: "must be a JSON object")
        }
    }

    /// The rule for `after` alone: for a job whose other fields its owner builds (a render's
    /// `render.run`), so that the request is refused before its transaction.
    public static func validate(after: [Int64]) throws {
        guard after.count <= maxDependencies else {
            throw QueueError.invalidJob(field: .after, reason: "names \(after.count) jobs; at most \(maxDependencies)")
        }
        if let id = after.first(where: { $0 <= 0 }) { throw QueueError.invalidJob(field: .after, reason: "names \(id), which is no job id") }
    }
}

private func isJSONWhitespace(_ byte: UInt8) -> Bool {
    byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D
}
