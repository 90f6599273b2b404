import DispatcherProtocol
import FleetQueue
import FleetSupport
@testable import FleetTestSupport
import Foundation
@testable import Renders
import Testing

/// The `dispatcher` executable as a person types it: tables by default and JSON with `--json`,
/// help that names each command once and the variables that are read, refusals that say what
/// would be accepted.
@Suite struct CommandLineTests {
    /// Runs the built `dispatcher` with `arguments`; its exit code and what it printed (stdout and stderr).
    static func dispatcher(_ arguments: [String], environment: [String: String] = ProcessInfo.processInfo.environment) async throws -> (status: Int32, output: String) {
        let output = temporaryPath("cli") + ".out"
        let status = try await ChildProcess.run(builtExecutable("dispatcher"), arguments, environment: environment, outputPath: output)
        return (status, (try? String(contentsOfFile: output, encoding: .utf8)) ?? "")
    }

    @Test func helpListsEachCommandOnceAndTheAccessTokensNameDatabaseURL() async throws {
        let help = try await Self.dispatcher(["--help"])
        #expect(help.status == 0)
        // `  status, job   Print one job…`: the names before the description, aliases included.
        let commands = help.output.split(separator: "\n").flatMap { line -> [String] in
            guard line.hasPrefix("  "), !line.hasPrefix("   "), let names = line.dropFirst(2).components(separatedBy: "  ").first else { return [] }
            return names.replacingOccurrences(of: " (default)", with: "").components(separatedBy: ", ")
        }
        #expect(commands.filter { $0 == "job" }.count == 1, "\(help.output)")
        #expect(Set(commands).count == commands.count, "\(help.output)")
        #expect(commands.contains("credits"))

        let tokens = try await Self.dispatcher(["access-token", "--help"])
        #expect(tokens.output.contains("DATABASE_URL") && !tokens.output.contains("FLEET_DATABASE_URL"), "\(tokens.output)")
    }

    /// No database where DATABASE_URL points: the refusal says which variable, and how to set it.
    @Test func accessTokensWithoutADatabaseSayWhereTheyLooked() async throws {
        var environment = ProcessInfo.processInfo.environment
        environment["DATABASE_URL"] = "postgresql://postgres@127.0.0.1:1/wearbloom?connect_timeout=5"
        let listed = try await Self.dispatcher(["access-token", "list"], environment: environment)
        #expect(listed.status != 0)
        #expect(listed.output.contains("DATABASE_URL could not be reached") && listed.output.contains("scripts/pg.sh url"), "\(listed.output)")
    }

    @Test func statsAndJobsListPrintTablesAndJSONWithTheFlag() async throws {
        try await TestDispatcher.run { dispatcher in
            let socket = dispatcher.settings.socketPath!
            let dead = try await JobControlTests.makeDead(dispatcher.queue, count: 2, code: "PROVIDER_DOWN")

            let table = try await Self.dispatcher(["stats", "--dispatcher", socket])
            #expect(table.status == 0, "\(table.output)")
            let lines = table.output.split(separator: "\n")
            #expect(lines.first?.hasPrefix("KIND") == true && lines.first?.contains("DEAD") == true, "\(table.output)")
            let scriptRow = try #require(lines.first { $0.hasPrefix("drill.script ") }, "\(table.output)")
            #expect(scriptRow.split(separator: " ").map(String.init)[7] == "2", "the DEAD column: \(scriptRow)")
            let json = try await Self.dispatcher(["stats", "--json", "--dispatcher", socket])
            let stats = try WireFormat.makeDecoder().decode(QueueStats.self, from: Data(json.output.utf8))
            #expect(stats.kinds.first { $0.kind == "drill.script" }?.dead == 2)

            let jobs = try await Self.dispatcher(["jobs", "list", "--state", "dead", "--limit", "1", "--dispatcher", socket])
            let jobLines = jobs.output.split(separator: "\n")
            #expect(jobLines.first?.hasPrefix("ID") == true, "\(jobs.output)")
            #expect(jobLines.count == 3 && jobLines[1].hasPrefix("\(dead[1]) ") && jobLines[1].contains("PROVIDER_DOWN: failed"), "\(jobs.output)")
            #expect(jobLines[2].hasPrefix("(more: --cursor "), "\(jobs.output)")
            let page = try await Self.dispatcher(["jobs", "list", "--state", "dead", "--json", "--dispatcher", socket])
            let decoded = try WireFormat.makeDecoder().decode(JobsListRequest.Result.self, from: Data(page.output.utf8))
            #expect(decoded.jobs.map(\.id) == dead.reversed())
        }
    }

    @Test func renderCommandsNameTheVotesShowTheInputJobsAndTheBalance() async throws {
        try await TestDispatcher.run { dispatcher in
            let socket = dispatcher.settings.socketPath!
            try await RenderOperationTests.grant(dispatcher, "u1", credits: 2)
            let feedback = try await Self.dispatcher(["render", "feedback", "r1", "thumbs-down", "--user", "u1", "--dispatcher", socket])
            #expect(feedback.status != 0 && feedback.output.contains("'up'") && feedback.output.contains("'down'"), "\(feedback.output)")

            let requested = try await Self.dispatcher(["render", "request", "r1", "--user", "u1", "--garment", "g1", "--body", "b1",
                                                       "--body-upload", "up1", "--category", "tops", "--dispatcher", socket])
            #expect(requested.status == 0, "\(requested.output)")
            let status = try await Self.dispatcher(["render", "status", "r1", "--jobs", "--dispatcher", socket])
            let shown = try JSONValue(json: status.output)
            guard case .array(let jobs)? = shown["jobs"] else { throw TestFailure("no jobs in \(status.output)") }
            #expect(jobs.map { $0["kind"] } == [.string("render.run"), .string("image.normalize")], "\(status.output)")
            #expect(jobs.map { $0["state"] } == [.string("waiting"), .string("available")], "\(status.output)")
            #expect(shown["render"]?["id"] == .string("r1"))

            let balance = try JSONValue(json: try await Self.dispatcher(["credits", "get", "u1", "--dispatcher", socket]).output)
            #expect(balance["granted"] == .number(2) && balance["reserved"] == .number(1) && balance["available"] == .number(1), "\(balance.jsonText)")
            #expect(balance["subscription"] == .null && balance["subscribed"] == .bool(false))
        }
    }
}
