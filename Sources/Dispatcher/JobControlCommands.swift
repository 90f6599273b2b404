import FleetAccess
import ArgumentParser
import DispatcherCore
import DispatcherProtocol
import FleetPostgres
import FleetRuntime
import Foundation

// Operators' commands: job control over the socket (a token with the `operate` role, or the Unix
// socket), and the access tokens themselves, straight in the database.

/// A look-back such as `90s`, `15m`, `1h`, `2d`.
struct LookBack: ExpressibleByArgument {
    let seconds: Double

    init?(argument: String) {
        let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
        guard let unit = argument.last.flatMap({ units[$0] }), let count = Double(argument.dropLast()), count >= 0 else { return nil }
        seconds = count * unit
    }

    var date: Date { Date().addingTimeInterval(-seconds) }
}

/// The `jobs.list` filter as options, shared by `jobs list`, `jobs retry` and `jobs discard`.
struct JobFilterOptions: ParsableArguments {
    @Option(help: "A state (available, running, completed, dead, cancelled); repeat for several.") var state: [JobStatus.State] = []
    @Option(help: "A job kind; repeat for several.") var kind: [String] = []
    @Option(help: "A named queue; repeat for several.") var queue: [String] = []
    @Option(help: "The code of the job's latest error, e.g. PROVIDER_DOWN.") var code: String?
    @Option(help: "Finished within this look-back (30m, 1h, 2d).") var since: LookBack?
    @Option(help: "Finished before this look-back.") var until: LookBack?
    @Option(help: "Created within this look-back.") var createdSince: LookBack?
    @Option(help: "Created before this look-back.") var createdUntil: LookBack?

    var filter: JobFilterArguments {
        JobFilterArguments(
            states: state.isEmpty ? nil : state, kinds: kind.isEmpty ? nil : kind, queues: queue.isEmpty ? nil : queue,
            errorCode: code, createdAfter: createdSince?.date, createdBefore: createdUntil?.date,
            finishedAfter: since?.date, finishedBefore: until?.date)
    }
}

extension JobStatus.State: ExpressibleByArgument {}

struct Jobs: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List, retry or discard jobs by filter.",
        subcommands: [List.self, RetryMany.self, DiscardMany.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "Jobs matching a filter, newest first, one page (a table; --json for scripts).")
        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var filter: JobFilterOptions
        @Option(help: "Jobs per page (at most \(JobsListRequest.maxLimit)).") var limit = JobsListRequest.defaultLimit
        @Option(help: "The nextCursor of the previous page.") var cursor: String?
        @OptionGroup var output: OutputFormat

        func run() async throws {
            try output.print(try await connection.send(JobsListRequest(filter: filter.filter, limit: limit, cursor: cursor)), table: JobsTable.text)
        }
    }

    struct RetryMany: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "retry", abstract: "Put dead and cancelled jobs matching a filter back in the queue.",
            discussion: """
                Runs in batches that never stall the workers; recorded in the audit trail. A render.run job whose render \
                has ended is left alone (counted under leftAlone, with why): retry the render, `dispatcher render retry <id>`.
                """)
        @OptionGroup var bulk: BulkOptions

        func run() async throws {
            try printJSON(try await bulk.connection.send(JobsRetryRequest(filter: bulk.filter.filter, limit: bulk.limit, dryRun: bulk.dryRun)))
        }
    }

    struct DiscardMany: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "discard", abstract: "Delete finished jobs matching a filter.", discussion: "Recorded in the audit trail.")
        @OptionGroup var bulk: BulkOptions

        func run() async throws {
            try printJSON(try await bulk.connection.send(JobsDiscardRequest(filter: bulk.filter.filter, limit: bulk.limit, dryRun: bulk.dryRun)))
        }
    }
}

/// What a bulk command takes: where, which jobs, how many, or only count them.
struct BulkOptions: ParsableArguments {
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var filter: JobFilterOptions
    @Option(help: "At most this many jobs.") var limit = 10_000
    @Flag(help: "Only count them.") var dryRun = false
}

struct JobCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "job", abstract: "One job whole: payload, options, attempts, timings.")
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The job id.") var id: Int64

    func run() async throws { try printJSON(try await connection.send(JobGetRequest(jobId: id))) }
}

struct Retry: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Put one dead or cancelled job back in the queue (errors kept, one more attempt).")
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The job id.") var id: Int64
    @Option(help: "Run it after this many seconds (default: now).") var delay: Double?

    func run() async throws {
        try printJSON(try await connection.send(JobRetryRequest(jobId: id, runAt: delay.map { Date().addingTimeInterval($0) })))
    }
}

struct Discard: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Delete one finished job.")
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The job id.") var id: Int64

    func run() async throws { try printJSON(try await connection.send(JobDiscardRequest(jobId: id))) }
}

/// A kind as the argument, or a named queue with --queue.
struct PauseTargetOptions: ParsableArguments {
    @Argument(help: "The job kind, e.g. garment.cutout.") var kind: String?
    @Option(help: "A named queue instead of a kind.") var queue: String?

    func validate() throws {
        guard (kind == nil) != (queue == nil) else { throw ValidationError("give a kind or --queue, not both") }
    }
}

struct Pause: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Stop every worker claiming a kind's (or a queue's) jobs; running jobs finish.",
        discussion: "A row in the database: it holds across restarts until `dispatcher resume`.")
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var target: PauseTargetOptions

    func run() async throws { try printJSON(try await connection.send(QueuePauseRequest(kind: target.kind, queue: target.queue))) }
}

struct Resume: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Lift a pause; the workers claim again at once.")
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var target: PauseTargetOptions

    func run() async throws { try printJSON(try await connection.send(QueueResumeRequest(kind: target.kind, queue: target.queue))) }
}

struct Limits: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Fleet-wide limits: at most so many jobs with a key running, or started per window.",
        discussion: """
            Keys: `provider:fal-fashn` (a provider's renders), `user:*` (each user on its own). Every worker \
            honours a change from its next claim on; changes are in the audit trail. docs/queue.md, "Limits".
            """,
        subcommands: [List.self, Set.self, Remove.self], defaultSubcommand: List.self)

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The limits and the use made of them now.")
        @OptionGroup var connection: ConnectionOptions

        func run() async throws { try printJSON(try await connection.send(LimitsListRequest())) }
    }

    struct Set: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create or replace the limit of a key (or a prefix ending in *).")
        @OptionGroup var connection: ConnectionOptions
        @Argument(help: "The key, e.g. provider:fal-fashn, or user:* for each user.") var key: String
        @Option(help: "At most this many of its jobs running at once.") var maxRunning: Int?
        @Option(help: "At most this many started per window.") var rate: Int?
        @Option(help: "The rate's window in seconds.") var window: Double = 60

        func validate() throws {
            guard maxRunning != nil || rate != nil else { throw ValidationError("give --max-running, --rate, or both") }
        }

        func run() async throws {
            try printJSON(try await connection.send(LimitSetRequest(key: key, maxRunning: maxRunning, rate: rate, rateWindowSeconds: window)))
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Stop limiting a key's jobs.")
        @OptionGroup var connection: ConnectionOptions
        @Argument(help: "The key, as `limits list` shows it.") var key: String

        func run() async throws { try printJSON(try await connection.send(LimitRemoveRequest(key: key))) }
    }
}

struct Audit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Operator actions, newest first: who, when, what, how many rows.")
    @OptionGroup var connection: ConnectionOptions
    @Option(help: "Entries per page (at most \(JobsListRequest.maxLimit)).") var limit = JobsListRequest.defaultLimit
    @Option(help: "The nextCursor of the previous page.") var cursor: String?

    func run() async throws { try printJSON(try await connection.send(AuditListRequest(limit: limit, cursor: cursor))) }
}

extension AccessRole: ExpressibleByArgument {}

struct AccessTokenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "access-token", abstract: "Named access tokens with a role (submit, read, operate), in the database.",
        discussion: """
            Every dispatcher picks a change up within 2 seconds. Rotate without downtime: create the new token, \
            move the clients, revoke the old one. Talks to the database itself (DATABASE_URL), not to a dispatcher.
            """,
        subcommands: [Create.self, List.self, Revoke.self])

    /// Runs `body` on the tokens' table; a database it cannot reach is answered with where it looked.
    static func withStore<T>(_ body: (AccessTokenStore) async throws -> T) async throws -> T {
        let settings = try FleetProcess.bootstrap()
        let store = AccessTokenStore(pool: settings.makePool(maxConnections: 1, applicationName: "dispatcher access-token"))
        do {
            return try await body(store)
        } catch PostgresError.connectionFailed(let message) {
            let environment = ProcessInfo.processInfo.environment["DATABASE_URL"] ?? ""
            let target = environment.isEmpty ? "DATABASE_URL is not set, so libpq's defaults were tried" : "DATABASE_URL could not be reached"
            throw DatabaseUnreachable(description: """
                cannot connect to PostgreSQL (\(target)): \(message.trimmingCharacters(in: .whitespacesAndNewlines))
                access-token reads and writes the fleet's database directly: set DATABASE_URL to it \
                (for the embedded one: export DATABASE_URL=$(scripts/pg.sh url)).
                """)
        }
    }

    /// The database is not where DATABASE_URL points (or it is unset): not a usage error.
    struct DatabaseUnreachable: Error, CustomStringConvertible {
        let description: String
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a token and print it: the only time it is shown.")
        @Option(help: "Its name, in the audit trail and the logs (A-Z a-z 0-9 . _ -; not 'default' or 'unix-socket').") var name: String
        @Option(help: "submit, read or operate.") var role: AccessRole

        func run() async throws { print(try await AccessTokenCommand.withStore { try await $0.create(name: name, role: role) }) }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Names, roles and dates (never the tokens).")

        func run() async throws {
            for token in try await AccessTokenCommand.withStore({ try await $0.list() }) {
                let revoked = token.revokedAt.map { " revoked \($0.formatted(.iso8601))" } ?? ""
                let renamed = token.renamedFrom.map { " (was named '\($0)', a name the system reserves)" } ?? ""
                print("\(token.name)\t\(token.role.rawValue)\tcreated \(token.createdAt.formatted(.iso8601))\(revoked)\(renamed)")
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke a token: refused from the next request on, open connections included.")
        @Option(help: "The token's name.") var name: String

        func run() async throws { try await AccessTokenCommand.withStore { try await $0.revoke(name: name) } }
    }
}
