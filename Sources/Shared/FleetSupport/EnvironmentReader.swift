import Foundation

/// A setting that cannot be used; the process stops at start with this message.
public struct ConfigurationError: Error, CustomStringConvertible, Sendable {
    public let variable: String
    public let reason: String

    public init(variable: String, reason: String) {
        self.variable = variable
        self.reason = reason
    }

    public var description: String { "configuration error: \(variable): \(reason)" }
}

/// Typed reads of environment variables, each error naming its variable.
public struct EnvironmentReader: Sendable {
    public let environment: [String: String]

    public init(environment: [String: String]) { self.environment = environment }

    public func integer(_ name: String, default value: Int, range: ClosedRange<Int>) throws -> Int {
        guard let text = environment[name], !text.isEmpty else { return value }
        guard let number = Int(text.trimmingCharacters(in: .whitespaces)), range.contains(number) else {
            throw ConfigurationError(variable: name, reason: "'\(text)' is not a whole number in \(range.lowerBound)...\(range.upperBound)")
        }
        return number
    }

    public func duration(_ name: String, unit: Duration, default value: Int, range: ClosedRange<Int>) throws -> Duration {
        try unit * integer(name, default: value, range: range)
    }

    public func choice<T: RawRepresentable>(_ name: String, default value: T) throws -> T where T.RawValue == String {
        guard let text = environment[name], !text.isEmpty else { return value }
        guard let choice = T(rawValue: text.lowercased()) else {
            throw ConfigurationError(variable: name, reason: "'\(text)' is not one of the accepted values")
        }
        return choice
    }

    public func list(_ name: String) throws -> [String]? {
        guard let text = environment[name], !text.isEmpty else { return nil }
        let items = text.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
        guard !items.contains(where: \.isEmpty) else { throw ConfigurationError(variable: name, reason: "empty item in '\(text)'") }
        return items
    }
}
