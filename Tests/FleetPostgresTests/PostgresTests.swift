import FleetHTTP
import FleetPostgres
import FleetSchema
import FleetRuntime
import FleetSupport
import FleetQueue
import Foundation
import Testing

@Suite struct PostgresTests {
    @Test func arrayParametersSurviveQuotesBackslashesNullsAndUnicode() async throws {
        let q = try await TestQueue.make()
        let values: [String?] = [#"a "quoted" \ back"#, nil, "NULL", "", "{,}", "Zürich 👗", "line\nbreak"]
        let rows = try await q.pool.query("SELECT x FROM unnest($1::text[]) WITH ORDINALITY AS u(x, n) ORDER BY n",
                                          [PostgresArray(values)]).rows
        #expect(rows.map { $0["x"] } == values)
    }

    @Test func serverErrorsCarryTheirSQLState() async throws {
        let q = try await TestQueue.make()
        await #expect {
            try await q.pool.query("SELECT * FROM no_such_table")
        } throws: { error in
            guard case PostgresError.server(let state, let message, _) = error else { return false }
            return state.rawValue == "42P01" && message.contains("no_such_table")
        }
    }

    @Test func badConnectionStringsAreRefusedBeforeConnecting() {
        #expect(throws: PostgresError.self) { try PostgresConnection.validate(conninfo: "host=localhost nonsense_option=1") }
        #expect(throws: PostgresError.self) { try PostgresConnection.validate(conninfo: "postgresql://a:b@[bad") }
        #expect(throws: Never.self) { try PostgresConnection.validate(conninfo: "") }
    }

    @Test func connectionErrorsDoNotRevealThePassword() async throws {
        await #expect {
            _ = try await PostgresConnection.connect("postgresql://postgres:hunter2secret@127.0.0.1:1/x")
        } throws: { error in
            guard case PostgresError.connectionFailed(let message) = error else { return false }
            return !message.contains("hunter2secret") && !"\(error)".contains("hunter2secret")
        }
    }

    /// The pool and the notifier both come back by themselves after the server restarts.
    @Test func poolAndListenerReconnectAfterServerRestart() async throws {
        try await PostgresCluster.withPrivate { cluster in
            let url = try await cluster.makeDatabase()
            let pool = PostgresPool(conninfo: url, maxConnections: 2)
            #expect(try await pool.query("SELECT 1 AS one").rows[0].int("one") == 1)
            let listening = TestNotifier(url: url)
            defer { listening.stop() }
            var events = listening.events(["probe"])
            #expect(await events.next() == .mightHaveMissed)

            try await cluster.restart()

            let value = try await pool.withRetry { try await $0.query("SELECT 2 AS two").rows[0].int("two") }
            #expect(value == 2)
            #expect(await events.next() == .mightHaveMissed)
            try await pool.query("SELECT pg_notify('probe', 'after restart')")
            #expect(await events.next() == .notification(channel: "probe", payload: "after restart"))
        }
    }
}

@Suite struct MigratorTests {
    @Test func tenProcessesMigratingAtOnceApplyEachVersionOnce() async throws {
        let url = try await PostgresCluster.shared.makeEmptyDatabase()
        let applied = try await withThrowingTaskGroup(of: [Int].self) { group in
            for _ in 0..<10 { group.addTask { try await Migrator(migrations: FleetSchema.migrations, logger: testLogger).migrate(conninfo: url) } }
            return try await group.reduce(into: [Int]()) { $0 += $1 }
        }
        // Each version once, by whichever process took its lock first.
        #expect(applied.sorted() == Set(FleetSchema.migrations.map(\.version)).sorted())
        let pool = PostgresPool(conninfo: url, maxConnections: 1)
        let versions = try await pool.query("SELECT version FROM schema_migrations ORDER BY version").rows.map { try $0.int("version") }
        #expect(versions == Set(FleetSchema.migrations.map(\.version)).sorted())
        // Running again applies nothing.
        #expect(try await Migrator(migrations: FleetSchema.migrations, logger: testLogger).migrate(conninfo: url).isEmpty)
    }
}

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
