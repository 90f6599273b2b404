import Foundation

/// A maintenance task the schedule can name, built into the dispatcher (one maintenance
/// service each). The queue's own are here; other modules declare theirs.
public struct MaintenanceTask: RawRepresentable, Hashable, Sendable, Comparable, CustomStringConvertible {
    public let rawValue: String

    public init(rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }
    public static func < (lhs: MaintenanceTask, rhs: MaintenanceTask) -> Bool { lhs.rawValue < rhs.rawValue }

    /// Running jobs whose lease expired go back to the queue.
    public static let leasesRescue = MaintenanceTask(rawValue: "leases.rescue")
    /// Finished jobs past their retention, and long-silent workers, are deleted.
    public static let jobsPrune = MaintenanceTask(rawValue: "jobs.prune")
    /// Queued jobs of a kind nothing handles end `dead`.
    public static let kindsSweep = MaintenanceTask(rawValue: "kinds.sweep")
    /// The finished jobs' count changes are folded into the counts.
    public static let countsFold = MaintenanceTask(rawValue: "counts.fold")
}

/// What a schedule line may name: the dispatcher's built-in tasks and the fleet's job kinds.
public struct ScheduleVocabulary: Sendable {
    public let tasks: Set<MaintenanceTask>
    public let kinds: KnownKinds

    public init(tasks: Set<MaintenanceTask>, kinds: KnownKinds) {
        self.tasks = tasks
        self.kinds = kinds
    }
}

/// What a schedule entry does at each slot.
public enum ScheduleTarget: Sendable, Hashable {
    case task(MaintenanceTask)
    /// Enqueued through the queue (retried and visible like any job) in the slot's transaction.
    case job(kind: JobKind, payload: String)
    /// Jobs that run after one another (`ScheduledGraph`), enqueued together in the slot's
    /// transaction; named `graph:<name>`.
    case graph(ScheduledGraph)

    public var name: String {
        switch self {
        case .task(let task): task.rawValue
        case .job(let kind, _): kind.rawValue
        case .graph(let graph): graph.entryName
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

}

/// One configured line, `expression => target [payload]` or `off => target`.
public enum ScheduleLine: Sendable, Equatable {
    case entry(ScheduleEntry)
    case disable(String)

    public init(_ text: String, vocabulary: ScheduleVocabulary) throws(ScheduleLineError) {
        guard let arrow = text.range(of: "=>") else { throw .syntax("'\(text)' is not 'expression => target'") }
        let when = text[..<arrow.lowerBound].trimmingCharacters(in: .whitespaces)
        let what = text[arrow.upperBound...].trimmingCharacters(in: .whitespaces)
        let name = String(what.prefix { !$0.isWhitespace })
        let payload = what.dropFirst(name.count).trimmingCharacters(in: .whitespaces)
        guard !name.isEmpty else { throw .syntax("'\(text)' has no target after '=>'") }
        let target = try Self.target(name, payload: payload, vocabulary: vocabulary)
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

    private static func target(_ name: String, payload: String, vocabulary: ScheduleVocabulary) throws(ScheduleLineError) -> ScheduleTarget {
        if name.hasPrefix(ScheduledGraph.prefix) {
            return .graph(try ScheduledGraph(entryName: name, json: payload, kinds: vocabulary.kinds))
        }
        let task = MaintenanceTask(rawValue: name)
        if vocabulary.tasks.contains(task) {
            guard payload.isEmpty else { throw .payload("the built-in \(name) takes no payload") }
            return .task(task)
        }
        let kind = JobKind(rawValue: name)
        guard vocabulary.kinds.contains(kind) else {
            let tasks = vocabulary.tasks.sorted().map(\.rawValue).joined(separator: ", ")
            throw .unknownTarget("'\(name)' is neither a built-in (\(tasks)), a job kind nor a graph:<name>")
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
