import FleetSupport

/// What the dispatcher's render and onboarding ops need (`docs/configuration.md`).
public struct RenderRequestSettings: Sendable {
    /// From request to `RENDER_TIMEOUT` (docs/product.md, "Renders": 30 s; shorter in tests).
    public var deadline: Duration
    /// How long an onboarding token stays good for its one free render.
    public var tokenTTL: Duration
    /// Credits granted once when an onboarding token is linked to a new account.
    public var freeCredits: Int
    /// Renders one user (or onboarding token) may have running at once, fleet-wide: the
    /// `user:*` limit written at the first start (operators change the row afterwards).
    public var perUserConcurrency: Int

    public init(deadline: Duration = .seconds(30), tokenTTL: Duration = .seconds(86_400), freeCredits: Int = 3, perUserConcurrency: Int = 2) {
        self.deadline = deadline
        self.tokenTTL = tokenTTL
        self.freeCredits = freeCredits
        self.perUserConcurrency = perUserConcurrency
    }

    public static func load(from environment: [String: String]) throws -> RenderRequestSettings {
        let reader = EnvironmentReader(environment: environment)
        let defaults = RenderRequestSettings()
        return RenderRequestSettings(
            deadline: try reader.duration("FLEET_RENDER_DEADLINE_SECONDS", unit: .seconds(1), default: Int(defaults.deadline.seconds), range: 1...600),
            tokenTTL: try reader.duration("FLEET_ONBOARDING_TOKEN_TTL_SECONDS", unit: .seconds(1), default: Int(defaults.tokenTTL.seconds), range: 60...(90 * 86_400)),
            freeCredits: try reader.integer("FLEET_FREE_CREDITS", default: defaults.freeCredits, range: 0...1000),
            perUserConcurrency: try reader.integer("FLEET_RENDER_USER_CONCURRENCY", default: defaults.perUserConcurrency, range: 1...100))
    }
}
