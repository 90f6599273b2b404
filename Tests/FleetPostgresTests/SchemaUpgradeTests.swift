import FleetCallbacks
import FleetPostgres
import FleetQueue
import FleetSchema
import FleetSupport
@testable import FleetTestSupport
import Foundation
import Imaging
@testable import Providers
@testable import Renders
import Testing

/// A database of an earlier release upgrades to today's schema with its rows intact: the
/// fixture `Tests/Fixtures/schema/fleet-at-migration-11.sql` (a pg_dump with rows in every
/// table) restored, then migrated; the result has the schema a fresh database gets.
@Suite struct SchemaUpgradeTests {
    static let fixture = packageRoot.appendingPathComponent("Tests/Fixtures/schema/fleet-at-migration-11.sql").path

    @Test func aDatabaseOfMigration11UpgradesWithItsRowsIntactToTheSchemaAFreshOneGets() async throws {
        let upgraded = try await PostgresCluster.shared.makeEmptyDatabase()
        try await Self.psql(upgraded, "-v", "ON_ERROR_STOP=1", "-q", "-f", Self.fixture)
        let applied = try await Migrator(migrations: FleetSchema.migrations, logger: testLogger).migrate(conninfo: upgraded)
        #expect(applied == Set(FleetSchema.migrations.map(\.version)).filter { $0 > 11 }.sorted())

        let pool = PostgresPool(conninfo: upgraded, maxConnections: 1)
        func value(_ sql: String) async throws -> String? { try await pool.query(sql).rows.first?["v"] }
        #expect(try await value("SELECT string_agg(kind || ':' || state, ',' ORDER BY id) AS v FROM jobs")
            == "drill.noop:completed,image.normalize:dead,garment.cutout:cancelled,drill.script:available,render.run:running")
        // The render mid-flight at fal: today's code reads its submission, to resume it.
        let stored = try #require(try await value("SELECT provider_submission::text AS v FROM renders WHERE id = 'r1'"))
        let submission = try JSONDecoder().decode(ProviderSubmission.self, from: Data(stored.utf8))
        #expect(submission.provider == "fal-fashn" && submission.jobID == "fal-req-1" && !submission.state.isSettled)
        #expect(try await value("SELECT sum(amount)::text AS v FROM credit_ledger WHERE user_id = 'u1'") == "6")
        #expect(try await value("SELECT (total_granted - total_consumed)::text AS v FROM credits WHERE user_id = 'u1'") == "4")
        #expect(try await value("SELECT render_id AS v FROM credit_reservations") == "r1")
        #expect(try await value("SELECT lease_owner AS v FROM jobs WHERE state = 'running'") == "w-render-1")
        #expect(try await value("SELECT string_agg(name || ':' || role, ',' ORDER BY name) AS v FROM access_tokens")
            == "backend:submit,default.renamed-02020202:read,grafana:read")
        #expect(try await value("SELECT renamed_from AS v FROM access_tokens WHERE renamed_from IS NOT NULL") == "default")
        #expect(try await value("SELECT count(*)::text AS v FROM console_sessions") == "0")  // sessions of the old form end
        #expect(try await value("SELECT value #>> '{}' AS v FROM fleet_settings WHERE key = 'render.provider'") == "fal-fashn")

        let fresh = try await PostgresCluster.shared.makeDatabase()
        let upgradedSchema = try await Self.schema(upgraded)
        let freshSchema = try await Self.schema(fresh)
        #expect(!upgradedSchema.isEmpty)
        #expect(upgradedSchema == freshSchema, "the upgraded schema differs from a fresh one: \(Self.difference(upgradedSchema, freshSchema))")
    }

    /// `pg_dump --schema-only`, without the dump's random `\restrict` key.
    static func schema(_ url: String) async throws -> [String] {
        let path = temporaryPath("schema") + ".sql"
        try await psqlTool("pg_dump", "--schema-only", "--no-owner", "--no-privileges", "--file", path, url)
        return try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
            .filter { !$0.hasPrefix("\\restrict") && !$0.hasPrefix("\\unrestrict") }.map(String.init)
    }

    static func difference(_ a: [String], _ b: [String]) -> String {
        let onlyA = a.filter { !b.contains($0) }.prefix(10), onlyB = b.filter { !a.contains($0) }.prefix(10)
        return "only upgraded: \(onlyA.joined(separator: " | ")); only fresh: \(onlyB.joined(separator: " | "))"
    }

    static func psql(_ url: String, _ arguments: String...) async throws {
        try await psqlTool("psql", (arguments + ["--dbname", url]))
    }

    static func psqlTool(_ tool: String, _ arguments: String...) async throws { try await psqlTool(tool, arguments) }

    static func psqlTool(_ tool: String, _ arguments: [String]) async throws {
        let log = temporaryPath(tool) + ".log"
        let status = try await ChildProcess.run("/usr/bin/\(tool)", arguments, outputPath: log)
        guard status == 0 else {
            throw TestFailure("\(tool) exited \(status): \((try? String(contentsOfFile: log, encoding: .utf8))?.suffix(1500) ?? "")")
        }
    }
}
