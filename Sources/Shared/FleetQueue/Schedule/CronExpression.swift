import Foundation

/// A cron expression, evaluated in UTC: standard five fields (minute hour day-of-month month
/// day-of-week) or, as an extension, six with a leading seconds field. Accepts `*`, lists,
/// ranges, steps (`*/5`, `10-40/10`, `7/15`), month and weekday names (`jan`, `mon-fri`),
/// 7 as Sunday, and the macros `@yearly`/`@annually`, `@monthly`, `@weekly`, `@daily`/`@midnight`,
/// `@hourly`. When both day fields are restricted, a day matches either (Vixie cron's rule);
/// a day field written from `*` (`*`, `*/2`) counts as unrestricted.
public struct CronExpression: Sendable, Hashable, CustomStringConvertible {
    public let description: String
    let seconds: FieldSet
    let minutes: FieldSet
    let hours: FieldSet
    let daysOfMonth: FieldSet
    let months: FieldSet
    let daysOfWeek: FieldSet
    let dayOfMonthRestricted: Bool
    let dayOfWeekRestricted: Bool

    public init(_ text: String) throws(CronParseError) {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let expanded = try Self.expandMacro(trimmed)
        var fields = expanded.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
        switch fields.count {
        case 5: fields.insert("0", at: 0)
        case 6: break
        default: throw .fieldCount(text: trimmed, count: fields.count)
        }
        description = trimmed
        seconds = try CronField.second.parse(fields[0])
        minutes = try CronField.minute.parse(fields[1])
        hours = try CronField.hour.parse(fields[2])
        daysOfMonth = try CronField.dayOfMonth.parse(fields[3])
        months = try CronField.month.parse(fields[4])
        daysOfWeek = try CronField.dayOfWeek.parse(fields[5])
        dayOfMonthRestricted = !fields[3].hasPrefix("*")
        dayOfWeekRestricted = !fields[5].hasPrefix("*")
        // `0 0 30 2 *` would search forever: refuse a day of month no chosen month has.
        if !dayOfWeekRestricted, !(1...12).contains(where: { month in
            months.contains(month) && (1...Self.longestMonth[month - 1]).contains(where: daysOfMonth.contains)
        }) {
            throw .neverFires(text: trimmed)
        }
    }

    /// The first instant strictly after `date` that the expression matches, or nil when there
    /// is none within 30 years (only possible for Feb 29 paired with a weekday it rarely falls on).
    public func next(after date: Date) -> Date? {
        var time = Int64((date.timeIntervalSince1970).rounded(.down)) + 1
        let limit = time + 30 * 366 * 86_400
        while time < limit {
            let civil = CivilTime(epochSeconds: time)
            guard months.contains(civil.month) else {
                time = CivilTime.epochSeconds(year: civil.month == 12 ? civil.year + 1 : civil.year, month: civil.month % 12 + 1, day: 1)
                continue
            }
            guard matchesDay(civil) else { time = civil.startOfDay + 86_400; continue }
            guard let hour = hours.first(from: civil.hour) else { time = civil.startOfDay + 86_400; continue }
            if hour != civil.hour { time = civil.startOfDay + Int64(hour) * 3600; continue }
            guard let minute = minutes.first(from: civil.minute) else { time = civil.startOfHour + 3600; continue }
            if minute != civil.minute { time = civil.startOfHour + Int64(minute) * 60; continue }
            guard let second = seconds.first(from: civil.second) else { time = civil.startOfMinute + 60; continue }
            return Date(timeIntervalSince1970: TimeInterval(civil.startOfMinute + Int64(second)))
        }
        return nil
    }

    private func matchesDay(_ civil: CivilTime) -> Bool {
        let dom = daysOfMonth.contains(civil.day)
        let dow = daysOfWeek.contains(civil.weekday)
        if dayOfMonthRestricted && dayOfWeekRestricted { return dom || dow }
        return dom && dow
    }

    static let longestMonth = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]

    private static func expandMacro(_ text: String) throws(CronParseError) -> String {
        guard text.hasPrefix("@") else { return text }
        switch text.lowercased() {
        case "@yearly", "@annually": return "0 0 1 1 *"
        case "@monthly": return "0 0 1 * *"
        case "@weekly": return "0 0 * * 0"
        case "@daily", "@midnight": return "0 0 * * *"
        case "@hourly": return "0 * * * *"
        default: throw .unknownMacro(text)
        }
    }
}

/// Why a cron expression was refused, naming the field and the text at fault.
public enum CronParseError: Error, Equatable, CustomStringConvertible {
    case fieldCount(text: String, count: Int)
    case badField(field: CronField, text: String, reason: String)
    case unknownMacro(String)
    case neverFires(text: String)

    public var description: String {
        switch self {
        case .fieldCount(let text, let count):
            "'\(text)' has \(count) fields; expected 5 (minute hour day-of-month month day-of-week) or 6 (seconds first)"
        case .badField(let field, let text, let reason): "\(field.rawValue) field '\(text)': \(reason)"
        case .unknownMacro(let text): "unknown macro '\(text)' (@yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly)"
        case .neverFires(let text): "'\(text)' never fires: no chosen month has that day"
        }
    }
}

/// One field of a cron expression, with its range and names.
public enum CronField: String, Sendable {
    case second, minute, hour, dayOfMonth = "day-of-month", month, dayOfWeek = "day-of-week"

    var range: ClosedRange<Int> {
        switch self {
        case .second, .minute: 0...59
        case .hour: 0...23
        case .dayOfMonth: 1...31
        case .month: 1...12
        case .dayOfWeek: 0...7
        }
    }

    private var names: [String] {
        switch self {
        case .month: ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
        case .dayOfWeek: ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
        default: []
        }
    }

    func parse(_ text: String) throws(CronParseError) -> FieldSet {
        var set = FieldSet(0)
        for item in text.split(separator: ",", omittingEmptySubsequences: false) {
            set.formUnion(try parseItem(String(item), whole: text))
        }
        // Sunday is both 0 and 7.
        if self == .dayOfWeek && set.contains(7) { set.insert(0) }
        return set
    }

    private func parseItem(_ item: String, whole: String) throws(CronParseError) -> FieldSet {
        func bad(_ reason: String) -> CronParseError { .badField(field: self, text: whole, reason: reason) }
        guard !item.isEmpty else { throw bad("empty list item") }
        let parts = item.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count <= 2 else { throw bad("more than one step in '\(item)'") }
        var step = 1
        if parts.count == 2 {
            guard let value = Int(parts[1]), value >= 1, value <= range.upperBound else {
                throw bad("step '\(parts[1])' is not a whole number in 1...\(range.upperBound)")
            }
            step = value
        }
        let base = String(parts[0])
        let bounds: ClosedRange<Int>
        if base == "*" {
            bounds = self == .dayOfWeek ? 0...6 : range
        } else {
            let ends = base.split(separator: "-", omittingEmptySubsequences: false)
            guard ends.count <= 2 else { throw bad("'\(base)' is not a value or a range") }
            let low = try value(String(ends[0]), whole: whole)
            // `7/15` means from 7 to the end in steps of 15.
            var high = parts.count == 2 ? range.upperBound : low
            if ends.count == 2 { high = try value(String(ends[1]), whole: whole) }
            // `fri-sun` ends on Sunday as 7, not 0.
            if self == .dayOfWeek && ends.count == 2 && high == 0 { high = 7 }
            guard low <= high else { throw bad("range '\(base)' runs backwards") }
            bounds = low...high
        }
        var set = FieldSet(0)
        for value in stride(from: bounds.lowerBound, through: bounds.upperBound, by: step) { set.insert(value) }
        return set
    }

    private func value(_ text: String, whole: String) throws(CronParseError) -> Int {
        if let index = names.firstIndex(of: text.lowercased()) { return self == .month ? index + 1 : index }
        guard let number = Int(text), text.allSatisfy(\.isASCII) else {
            throw .badField(field: self, text: whole, reason: "'\(text)' is not a number\(names.isEmpty ? "" : " or a name (\(names.joined(separator: ", ")))")")
        }
        guard range.contains(number) else {
            throw .badField(field: self, text: whole, reason: "\(number) is outside \(range.lowerBound)...\(range.upperBound)")
        }
        return number
    }
}

/// The values a field matches, as bits 0...63.
struct FieldSet: Hashable, Sendable {
    var bits: UInt64
    init(_ bits: UInt64) { self.bits = bits }
    func contains(_ value: Int) -> Bool { bits & (1 << UInt64(value)) != 0 }
    mutating func insert(_ value: Int) { bits |= 1 << UInt64(value) }
    mutating func formUnion(_ other: FieldSet) { bits |= other.bits }
    /// The smallest value ≥ `value` in the set.
    func first(from value: Int) -> Int? {
        let rest = value > 63 ? 0 : bits >> UInt64(value)
        return rest == 0 ? nil : value + rest.trailingZeroBitCount
    }
}

/// A UTC instant broken into calendar fields (proleptic Gregorian, Howard Hinnant's algorithm).
struct CivilTime {
    let year, month, day, hour, minute, second, weekday: Int
    let startOfDay: Int64

    init(epochSeconds: Int64) {
        let days = epochSeconds >= 0 ? epochSeconds / 86_400 : (epochSeconds - 86_399) / 86_400
        let secondOfDay = Int(epochSeconds - days * 86_400)
        startOfDay = days * 86_400
        hour = secondOfDay / 3600
        minute = secondOfDay % 3600 / 60
        second = secondOfDay % 60
        weekday = Int(((days % 7) + 11) % 7)  // 1970-01-01 was a Thursday (4)
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        day = Int(dayOfYear - (153 * shiftedMonth + 2) / 5 + 1)
        month = Int(shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9)
        year = Int(yearOfEra + era * 400) + (month <= 2 ? 1 : 0)
    }

    var startOfHour: Int64 { startOfDay + Int64(hour) * 3600 }
    var startOfMinute: Int64 { startOfHour + Int64(minute) * 60 }

    static func epochSeconds(year: Int, month: Int, day: Int) -> Int64 {
        let y = Int64(month <= 2 ? year - 1 : year)
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = Int64((153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1)
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return (era * 146_097 + dayOfEra - 719_468) * 86_400
    }
}
