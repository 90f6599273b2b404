import FleetSupport
import Foundation

/// The dispatcher's schedule: its built-in defaults, then `FLEET_SCHEDULE_FILE` (one entry per
/// line, `#` starts a comment line), then `FLEET_SCHEDULE` (entries separated by `;`). A later entry for a
/// target replaces the earlier one; `off => target` removes it. `docs/schedule.md`.
public struct ScheduleSettings: Sendable {
    public var entries: [ScheduleEntry]
    /// The most recent missed slot still fires when it is at most this late; older ones never do.
    public var lateness: Duration

    public init(entries: [ScheduleEntry], lateness: Duration = .seconds(60)) {
        self.entries = entries
        self.lateness = lateness
    }

    /// `defaults` is the built-in schedule; lines may name what `vocabulary` holds.
    public static func load(
        from environment: [String: String], defaults: [ScheduleEntry], vocabulary: ScheduleVocabulary
    ) throws -> ScheduleSettings {
        var entries = defaults
        if let path = environment["FLEET_SCHEDULE_FILE"], !path.isEmpty {
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw ConfigurationError(variable: "FLEET_SCHEDULE_FILE", reason: "cannot read \(path)")
            }
            let lines = text.split(separator: "\n", omittingEmptySubsequences: false).enumerated().map { ("\(path):\($0.offset + 1)", String($0.element)) }
            try apply(lines, variable: "FLEET_SCHEDULE_FILE", vocabulary: vocabulary, to: &entries)
        }
        if let text = environment["FLEET_SCHEDULE"], !text.isEmpty {
            let items = text.split(separator: ";", omittingEmptySubsequences: false).enumerated().map { ("entry \($0.offset + 1)", String($0.element)) }
            try apply(items, variable: "FLEET_SCHEDULE", vocabulary: vocabulary, to: &entries)
        }
        let lateness = try EnvironmentReader(environment: environment)
            .duration("FLEET_SCHEDULE_LATENESS_SECONDS", unit: .seconds(1), default: 60, range: 0...3600)
        return ScheduleSettings(entries: entries, lateness: lateness)
    }

    /// Applies one source's lines in order; naming a target twice in one source is a mistake.
    private static func apply(
        _ lines: [(place: String, text: String)], variable: String, vocabulary: ScheduleVocabulary, to entries: inout [ScheduleEntry]
    ) throws {
        var seen: Set<String> = []
        for (place, raw) in lines {
            let text = raw.trimmingCharacters(in: .whitespaces)
            if text.isEmpty || text.hasPrefix("#") { continue }
            let line: ScheduleLine
            do { line = try ScheduleLine(text, vocabulary: vocabulary) } catch { throw ConfigurationError(variable: variable, reason: "\(place) '\(text)': \(error)") }
            let name = switch line {
            case .entry(let entry): entry.name
            case .disable(let name): name
            }
            guard seen.insert(name).inserted else {
                throw ConfigurationError(variable: variable, reason: "\(place) '\(text)': \(name) is scheduled twice")
            }
            entries.removeAll { $0.name == name }
            if case .entry(let entry) = line { entries.append(entry) }
        }
    }
}
