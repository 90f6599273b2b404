import FleetSupport

/// `FLEET_CONSOLE` and `FLEET_CONSOLE_SESSION_MINUTES` (`docs/configuration.md`).
public struct ConsoleSettings: Sendable, Equatable {
    public enum Switch: String, Sendable { case on, off }

    /// Served under `/console` on the dispatcher's HTTP listener. Off unless asked for: the
    /// listener is often bound to every interface (containers), and the console is for people.
    public var enabled: Bool
    /// How long a login lasts; the session cookie expires with it.
    public var sessionLifetime: Duration

    public init(enabled: Bool = false, sessionLifetime: Duration = .seconds(8 * 3600)) {
        self.enabled = enabled
        self.sessionLifetime = sessionLifetime
    }

    public static func load(from environment: [String: String]) throws -> ConsoleSettings {
        let reader = EnvironmentReader(environment: environment)
        return ConsoleSettings(
            enabled: try reader.choice("FLEET_CONSOLE", default: Switch.off) == .on,
            sessionLifetime: try reader.duration("FLEET_CONSOLE_SESSION_MINUTES", unit: .seconds(60), default: 480, range: 1...10_080))
    }
}
