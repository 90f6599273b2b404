import FleetHTTP
import FleetQueue
import FleetRuntime
import FleetSupport
import Testing

@Suite struct ConfigurationTests {
    /// A process that runs the drill kinds (FLEET_CONCURRENCY may name only kinds it runs).
    static let drillKinds: [JobKind: Int] = [.drillNoop: 1, .drillScript: 1]

    @Test func defaultsApplyWhenNothingIsSet() throws {
        let settings = try FleetSettings.load(from: [:], defaultConcurrency: [.drillNoop: 7])
        #expect(settings.databaseURL == "")
        #expect(settings.worker.concurrency == [.drillNoop: 7])
        #expect(settings.worker.lease == .seconds(30))
        #expect(settings.reaperInterval == .seconds(1))
        #expect(settings.logLevel == .info && settings.logFormat == .json)
    }

    @Test func overridesAreRead() throws {
        let settings = try FleetSettings.load(from: [
            "FLEET_CONCURRENCY": "drill.noop=3, drill.script=9", "FLEET_LEASE_SECONDS": "5",
            "FLEET_QUEUES": "renders,images", "FLEET_LOG_LEVEL": "DEBUG",
        ], defaultConcurrency: Self.drillKinds)
        #expect(settings.worker.concurrency == [.drillNoop: 3, .drillScript: 9])
        #expect(settings.worker.lease == .seconds(5))
        #expect(settings.worker.queues == ["renders", "images"])
        #expect(settings.logLevel == .debug)
    }

    /// Behind a transaction pooler: unnamed statements on DATABASE_URL, the LISTEN session
    /// elsewhere or nowhere (docs/operations.md, "Behind PgBouncer").
    @Test func theListenDatabaseDefaultsToTheDatabaseAndCanBeSeparateOrOff() throws {
        let direct = "postgresql://postgres@db:5432/wearbloom", pooled = "postgresql://postgres@pgbouncer:6432/wearbloom"
        let defaults = try FleetSettings.load(from: ["DATABASE_URL": direct])
        #expect(defaults.listenDatabase == .url(direct) && defaults.databaseStatements == .prepared)
        let separate = try FleetSettings.load(from: [
            "DATABASE_URL": pooled, "FLEET_LISTEN_DATABASE_URL": direct, "FLEET_DATABASE_STATEMENTS": "Unnamed",
        ])
        #expect(separate.listenDatabase == .url(direct) && separate.databaseStatements == .unnamed)
        #expect(try FleetSettings.load(from: ["DATABASE_URL": pooled, "FLEET_LISTEN_DATABASE_URL": "off"]).listenDatabase == .off)
        // Unnamed statements (a transaction pooler) without saying where LISTEN goes: refused.
        #expect {
            _ = try FleetSettings.load(from: ["DATABASE_URL": pooled, "FLEET_DATABASE_STATEMENTS": "unnamed"])
        } throws: { error in
            (error as? ConfigurationError)?.variable == "FLEET_LISTEN_DATABASE_URL"
        }
    }

    @Test func theHTTPListenerDefaultsPerExecutableAndCanBeTurnedOff() throws {
        let dispatcherDefault = ListenAddress(host: "127.0.0.1", port: 9090)
        #expect(try FleetSettings.load(from: [:]).httpAddress == nil)
        #expect(try FleetSettings.load(from: [:], defaultHTTPAddress: dispatcherDefault).httpAddress == dispatcherDefault)
        #expect(try FleetSettings.load(from: ["FLEET_HTTP_ADDRESS": "OFF"], defaultHTTPAddress: dispatcherDefault).httpAddress == nil)
        #expect(try FleetSettings.load(from: ["FLEET_HTTP_ADDRESS": "0.0.0.0:9100"]).httpAddress == ListenAddress(host: "0.0.0.0", port: 9100))
        #expect(try FleetSettings.load(from: ["FLEET_HTTP_ADDRESS": "[::1]:9100"]).httpAddress == ListenAddress(host: "::1", port: 9100))
    }

    @Test(arguments: [
        ("DATABASE_URL", "postgresql://x@[broken"),
        ("FLEET_LEASE_SECONDS", "soon"),
        ("FLEET_LEASE_SECONDS", "0"),
        ("FLEET_REAPER_INTERVAL_MS", "10"),
        ("FLEET_CONCURRENCY", "drill.noop"),
        ("FLEET_CONCURRENCY", "image.resize=2"),
        ("FLEET_CONCURRENCY", "render.run=2"),
        ("FLEET_LOG_LEVEL", "loud"),
        ("FLEET_DB_POOL_SIZE", "-1"),
        ("FLEET_QUEUES", "a,,b"),
        ("FLEET_LISTEN_DATABASE_URL", "postgresql://x@[broken"),
        ("FLEET_DATABASE_STATEMENTS", "named"),
        ("FLEET_HTTP_ADDRESS", "9090"),
        ("FLEET_HTTP_ADDRESS", "/tmp/http.sock"),
    ])
    func aBadSettingNamesItsVariable(variable: String, value: String) {
        #expect {
            _ = try FleetSettings.load(from: [variable: value], defaultConcurrency: Self.drillKinds)
        } throws: { error in
            (error as? ConfigurationError)?.variable == variable && "\(error)".contains(variable)
        }
    }
}
