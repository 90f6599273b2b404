@testable import FleetQueue
import Foundation
import Testing

/// The cron parser and next-fire computation, in UTC.
@Suite struct CronExpressionTests {
    /// `2024-03-15T10:20:30Z` and the like, parsed as UTC.
    static func utc(_ text: String) -> Date { try! Date(text, strategy: .iso8601) }

    /// The next `count` fire times after `start`, as ISO 8601 text.
    func fires(_ expression: String, after start: String, count: Int = 4) throws -> [String] {
        let cron = try CronExpression(expression)
        var times: [String] = []
        var cursor = Self.utc(start)
        for _ in 0..<count {
            guard let next = cron.next(after: cursor) else { break }
            times.append(next.ISO8601Format())
            cursor = next
        }
        return times
    }

    @Test func everyMinuteStartsAtTheNextWholeMinute() throws {
        #expect(try fires("* * * * *", after: "2024-03-15T10:20:30Z", count: 2) == ["2024-03-15T10:21:00Z", "2024-03-15T10:22:00Z"])
        // A fire time is strictly after the given instant.
        #expect(try fires("* * * * *", after: "2024-03-15T10:21:00Z", count: 1) == ["2024-03-15T10:22:00Z"])
    }

    @Test func listsRangesAndSteps() throws {
        #expect(try fires("5,10-12 9 * * *", after: "2024-03-15T09:00:00Z") ==
                ["2024-03-15T09:05:00Z", "2024-03-15T09:10:00Z", "2024-03-15T09:11:00Z", "2024-03-15T09:12:00Z"])
        #expect(try fires("*/20 * * * *", after: "2024-03-15T09:41:00Z", count: 3) ==
                ["2024-03-15T10:00:00Z", "2024-03-15T10:20:00Z", "2024-03-15T10:40:00Z"])
        #expect(try fires("10-40/15 * * * *", after: "2024-03-15T09:00:00Z", count: 4) ==
                ["2024-03-15T09:10:00Z", "2024-03-15T09:25:00Z", "2024-03-15T09:40:00Z", "2024-03-15T10:10:00Z"])
        // `a/step` runs from a to the end of the field.
        #expect(try fires("0 20/2 * * *", after: "2024-03-15T00:00:00Z", count: 3) ==
                ["2024-03-15T20:00:00Z", "2024-03-15T22:00:00Z", "2024-03-16T20:00:00Z"])
    }

    @Test func monthAndWeekdayNamesAndSundayAsSeven() throws {
        // 2024-03-15 is a Friday.
        #expect(try fires("0 9 * * mon-fri", after: "2024-03-15T10:00:00Z", count: 2) == ["2024-03-18T09:00:00Z", "2024-03-19T09:00:00Z"])
        #expect(try fires("0 0 1 JAN,jul *", after: "2024-03-15T00:00:00Z", count: 2) == ["2024-07-01T00:00:00Z", "2025-01-01T00:00:00Z"])
        #expect(try fires("0 0 * * 7", after: "2024-03-15T00:00:00Z", count: 1) == ["2024-03-17T00:00:00Z"])
        #expect(try fires("0 0 * * 0", after: "2024-03-15T00:00:00Z", count: 1) == ["2024-03-17T00:00:00Z"])
        #expect(try fires("0 0 * * sat-sun", after: "2024-03-15T00:00:00Z", count: 2) == ["2024-03-16T00:00:00Z", "2024-03-17T00:00:00Z"])
    }

    @Test func bothDayFieldsRestrictedMatchEitherVixieRule() throws {
        // The 13th, or any Friday: Friday 15th, the 13th of April, Fridays between.
        #expect(try fires("0 0 13 * fri", after: "2024-03-14T00:00:00Z", count: 4) ==
                ["2024-03-15T00:00:00Z", "2024-03-22T00:00:00Z", "2024-03-29T00:00:00Z", "2024-04-05T00:00:00Z"])
        #expect(try fires("0 0 13 * fri", after: "2024-04-06T00:00:00Z", count: 2) == ["2024-04-12T00:00:00Z", "2024-04-13T00:00:00Z"])
        // A day field starting with `*` does not count as restricted: the 1st that is also a Monday.
        #expect(try fires("0 0 1 * */1", after: "2024-03-15T00:00:00Z", count: 1) == ["2024-04-01T00:00:00Z"])
        #expect(try fires("0 0 1 * mon", after: "2024-03-15T00:00:00Z", count: 2) == ["2024-03-18T00:00:00Z", "2024-03-25T00:00:00Z"])
    }

    @Test func monthEndsAndLeapYears() throws {
        // The 31st skips the months without one.
        #expect(try fires("0 0 31 * *", after: "2024-01-31T00:00:00Z", count: 3) ==
                ["2024-03-31T00:00:00Z", "2024-05-31T00:00:00Z", "2024-07-31T00:00:00Z"])
        // Feb 29 only in leap years; 2100 is not one, 2000 was.
        #expect(try fires("0 0 29 2 *", after: "2024-03-01T00:00:00Z", count: 2) == ["2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"])
        #expect(try fires("0 0 29 2 *", after: "2097-01-01T00:00:00Z", count: 1) == ["2104-02-29T00:00:00Z"])
        #expect(try fires("0 0 29 2 *", after: "1999-01-01T00:00:00Z", count: 1) == ["2000-02-29T00:00:00Z"])
        // Across a year end.
        #expect(try fires("59 23 31 12 *", after: "2024-12-31T23:59:00Z", count: 1) == ["2025-12-31T23:59:00Z"])
    }

    @Test func optionalSecondsField() throws {
        #expect(try fires("*/15 * * * * *", after: "2024-03-15T10:20:31Z", count: 3) ==
                ["2024-03-15T10:20:45Z", "2024-03-15T10:21:00Z", "2024-03-15T10:21:15Z"])
        #expect(try fires("30 0 12 * * *", after: "2024-03-15T12:00:30Z", count: 1) == ["2024-03-16T12:00:30Z"])
        // Fractions of a second: the next whole-second slot after the instant.
        let cron = try CronExpression("* * * * * *")
        #expect(cron.next(after: Self.utc("2024-03-15T10:20:30Z").addingTimeInterval(0.7)) == Self.utc("2024-03-15T10:20:31Z"))
    }

    @Test func macros() throws {
        #expect(try fires("@hourly", after: "2024-03-15T10:20:00Z", count: 1) == ["2024-03-15T11:00:00Z"])
        #expect(try fires("@daily", after: "2024-03-15T10:20:00Z", count: 1) == ["2024-03-16T00:00:00Z"])
        #expect(try fires("@midnight", after: "2024-03-15T10:20:00Z", count: 1) == ["2024-03-16T00:00:00Z"])
        #expect(try fires("@weekly", after: "2024-03-15T10:20:00Z", count: 1) == ["2024-03-17T00:00:00Z"])
        #expect(try fires("@monthly", after: "2024-03-15T10:20:00Z", count: 1) == ["2024-04-01T00:00:00Z"])
        #expect(try fires("@yearly", after: "2024-03-15T10:20:00Z", count: 1) == ["2025-01-01T00:00:00Z"])
        #expect(try fires("@annually", after: "2024-03-15T10:20:00Z", count: 1) == ["2025-01-01T00:00:00Z"])
    }

    @Test func invalidExpressionsNameTheFieldAndTheText() {
        let cases: [(String, CronParseError)] = [
            ("* * * *", .fieldCount(text: "* * * *", count: 4)),
            ("* * * * * * *", .fieldCount(text: "* * * * * * *", count: 7)),
            ("60 * * * *", .badField(field: .minute, text: "60", reason: "60 is outside 0...59")),
            ("* 24 * * *", .badField(field: .hour, text: "24", reason: "24 is outside 0...23")),
            ("* * 0 * *", .badField(field: .dayOfMonth, text: "0", reason: "0 is outside 1...31")),
            ("* * * 13 *", .badField(field: .month, text: "13", reason: "13 is outside 1...12")),
            ("* * * * 8", .badField(field: .dayOfWeek, text: "8", reason: "8 is outside 0...7")),
            ("* * * foo *", .badField(field: .month, text: "foo",
                                      reason: "'foo' is not a number or a name (jan, feb, mar, apr, may, jun, jul, aug, sep, oct, nov, dec)")),
            ("*/0 * * * *", .badField(field: .minute, text: "*/0", reason: "step '0' is not a whole number in 1...59")),
            ("30-10 * * * *", .badField(field: .minute, text: "30-10", reason: "range '30-10' runs backwards")),
            ("1,,2 * * * *", .badField(field: .minute, text: "1,,2", reason: "empty list item")),
            ("1-2-3 * * * *", .badField(field: .minute, text: "1-2-3", reason: "'1-2-3' is not a value or a range")),
            ("61 * * * * *", .badField(field: .second, text: "61", reason: "61 is outside 0...59")),
            ("@reboot", .unknownMacro("@reboot")),
            ("0 0 30 2 *", .neverFires(text: "0 0 30 2 *")),
        ]
        for (text, expected) in cases {
            #expect(throws: expected, "\(text)") { _ = try CronExpression(text) }
        }
        #expect(CronParseError.badField(field: .dayOfWeek, text: "8", reason: "8 is outside 0...7").description
                == "day-of-week field '8': 8 is outside 0...7")
    }

    @Test func civilCalendarAgreesWithFoundationOverCenturies() {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        var time: Int64 = -2_208_988_800  // 1900-01-01
        while time < 7_258_118_400 {  // 2200-01-01
            let civil = CivilTime(epochSeconds: time)
            let parts = calendar.dateComponents([.year, .month, .day, .weekday], from: Date(timeIntervalSince1970: TimeInterval(time)))
            #expect([civil.year, civil.month, civil.day, civil.weekday + 1] == [parts.year, parts.month, parts.day, parts.weekday])
            #expect(CivilTime.epochSeconds(year: civil.year, month: civil.month, day: civil.day) == time)
            time += 86_400 * 37 + 3_601
            time -= time % 86_400
        }
    }
}
