import FleetPostgres

/// The migrations of who may do what: access tokens, console sessions and the console's login key.
public enum AccessMigrations {
    public static let all = [accessTokens, consoleSessions, tokenIdentities]
}
