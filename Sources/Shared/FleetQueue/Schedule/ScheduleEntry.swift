import Foundation

/// A maintenance task built into the dispatcher, run by the dispatcher that wins a slot.
public enum MaintenanceTask: String, Sendable, CaseIterable {
    /// Expired, never-linked onboarding tokens, their renders and the files only they own.
    case tokensExpire = "tokens.expire"
    /// Open renders past their deadline fail with `RENDER_TIMEOUT`, credit released.
    case rendersTimeout = "renders.timeout"
    /// Running jobs whose lease expired go back to the queue.
    case leasesRescue = "leases.rescue"
    /// Finished jobs past their retention, and long-silent workers, are deleted.
    case jobsPrune = "jobs.prune"
    /// Queued jobs of a kind nothing handles end `dead`.
    case kindsSweep = "kinds.sweep"
}

/// What a schedule entry does at each slot.
public enum ScheduleTarget: Sendable, Hashable {
    case task(MaintenanceTask)
    /// Enqueued through the queue (retried and visible like any job) in the slot's transaction.
    case job(kind: JobKind, payload: String)

    public var name: String {
        switch self {
        case .task(let task): task.rawValue
        case .job(let kind, _): kind.rawValue
        }
    }
}

/// One line of the schedule: when, and what. Its name (the target's) keys its slots.
public struct ScheduleEntry: Sendable, Hashable {
    public let expression: CronExpression
    public let target: ScheduleTarget
    public var name: String { target.name }

    public init(expression: CronExpression, target: ScheduleTarget) {
        self.expression = expression
        self.target = target
    }

    /// The built-in schedule; configuration overrides or disables entries by target name.
    public static let defaults: [ScheduleEntry] = {
        let table: [(String, MaintenanceTask)] = [
            ("*/5 * * * * *", .rendersTimeout),
            ("*/15 * * * * *", .leasesRescue),
            ("* * * * *", .kindsSweep),
            ("*/5 * * * *", .tokensExpire),
            ("17 * * * *", .jobsPrune),
        ]
        // Constant expressions; a test parses them.
        return table.map { ScheduleEntry(expression: try! CronExpression($0.0), target: .task($0.1)) }
    }()
}

/// One configured line, `expression => target [payload]` or `off => target`.
public enum ScheduleLine: Sendable, Equatable {
    case entry(ScheduleEntry)
    case disable(String)

    public init(_ text: String) throws(ScheduleLineError) {
        guard let arrow = text.range(of: "=>") else { throw .syntax("'\(text)' is not 'expression => target'") }
        let when = text[..<arrow.lowerBound].trimmingCharacters(in: .whitespaces)
        let what = text[arrow.upperBound...].trimmingCharacters(in: .whitespaces)
        let name = String(what.prefix { !$0.isWhitespace })
        let payload = what.dropFirst(name.count).trimmingCharacters(in: .whitespaces)
        guard !name.isEmpty else { throw .syntax("'\(text)' has no target after '=>'") }
        let target = try Self.target(name, payload: payload)
        if when.lowercased() == "off" {
            self = .disable(target.name)
            return
        }
        do throws(CronParseError) {
            self = .entry(ScheduleEntry(expression: try CronExpression(when), target: target))
        } catch {
            throw .cron(error)
        }
    }

    private static func target(_ name: String, payload: String) throws(ScheduleLineError) -> ScheduleTarget {
        if let task = MaintenanceTask(rawValue: name) {
            guard payload.isEmpty else { throw .payload("the built-in \(name) takes no payload") }
            return .task(task)
        }
        let kind = JobKind(rawValue: name)
        guard kind.isKnown else {
            throw .unknownTarget("'\(name)' is neither a built-in (\(MaintenanceTask.allCases.map(\.rawValue).joined(separator: ", "))) nor a job kind")
        }
        let json = payload.isEmpty ? "{}" : payload
        guard (try? JSONSerialization.jsonObject(with: Data(json.utf8))) is [String: Any] else {
            throw .payload("the payload of \(name) is not a JSON object: \(payload)")
        }
        return .job(kind: kind, payload: json)
    }
}

public enum ScheduleLineError: Error, Equatable, CustomStringConvertible {
    case syntax(String)
    case cron(CronParseError)
    case unknownTarget(String)
    case payload(String)

    public var description: String {
        switch self {
        case .syntax(let reason), .unknownTarget(let reason), .payload(let reason): reason
        case .cron(let error): error.description
        }
    }
}
