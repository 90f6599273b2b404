import FleetPostgres
import FleetSchema
import FleetSupport
import FleetQueue
@testable import FleetTestSupport
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
