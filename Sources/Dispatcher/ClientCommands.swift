import ArgumentParser
import DispatcherCore
import DispatcherProtocol
import FleetSupport
import Foundation

/// Where the operator commands find the dispatcher; each command is one request over its socket.
struct ConnectionOptions: ParsableArguments {
    @Option(name: .customLong("dispatcher"),
            help: "A Unix socket path, or host:port for TCP (token from FLEET_DISPATCHER_TOKEN). Default: FLEET_DISPATCHER_SOCKET, else FLEET_DISPATCHER_TCP.")
    var address: String?

    func send<Request: DispatcherRequest>(_ request: Request) async throws -> Request.Result {
        let environment = ProcessInfo.processInfo.environment
        let settings = try DispatcherSettings.load(from: environment)
        let target: DispatcherAddress
        if let address {
            guard let parsed = DispatcherAddress(address) else { throw ValidationError("--dispatcher: '\(address)' is not a path or host:port") }
            target = parsed
        } else {
            guard let configured = settings.clientAddress else { throw ValidationError("no dispatcher address: both listeners are off") }
            target = configured
        }
        let client: DispatcherClient
        do {
            client = try await DispatcherClient.connect(to: target, token: settings.token, tls: settings.clientTLS)
        } catch let error as DispatcherError {
            throw error
        } catch {
            throw DispatcherUnreachable(description: "cannot reach the dispatcher at \(target) (\(error)); is `dispatcher run` running?")
        }
        do {
            let result = try await client.send(request)
            await client.close()
            return result
        } catch {
            await client.close()
            throw error
        }
    }
}

/// Prints a result as indented JSON, dates in ISO 8601.
func printJSON(_ value: some Encodable) throws {
    let encoder = WireFormat.makeEncoder()
    encoder.outputFormatting.insert(.prettyPrinted)
    print(String(decoding: try encoder.encode(value), as: UTF8.self))
}

/// No dispatcher listens at the address (yet).
struct DispatcherUnreachable: Error, CustomStringConvertible {
    let description: String
}

struct Ping: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check that the dispatcher answers.",
        discussion: "With --wait, keeps trying while it is starting (as pg_isready -t does): for scripts that start one.")
    @OptionGroup var connection: ConnectionOptions
    @Option(help: "Seconds to keep trying while nothing listens yet (default 0: one try).") var wait = 0.0

    func run() async throws {
        let deadline = ContinuousClock.now + .milliseconds(Int64(wait * 1000))
        while true {
            do {
                return try printJSON(try await connection.send(PingRequest()))
            } catch is DispatcherUnreachable where ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(100))
            }
        }
    }
}

struct Enqueue: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Enqueue one job and print its id.", discussion: "The kinds:\n" + FleetKinds.all.described)
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The job kind (listed below), e.g. drill.noop.") var kind: String
    @Option(help: "The payload, a JSON object.") var payload = "{}"
    @Option(help: "The queue (default: default).") var queue: String?
    @Option(help: "Priority, 0 (first) to 9 (default 2).") var priority: Int?
    @Option(help: "Seconds to wait before the first run.") var delay: Double?
    @Option(help: "Attempts before the job is dead (default 5).") var maxAttempts: Int?
    @Option(help: "Enqueueing the same key again returns the first job.") var idempotencyKey: String?
    @Option(help: "Where the fleet POSTs the job's signed end (a host in FLEET_OUTBOUND_HOSTS).") var callbackUrl: String?
    @Option(help: ArgumentHelp("Ids of jobs it runs after, comma-separated (at most 100): it waits until each is completed.",
                               valueName: "ids")) var after: String?

    func run() async throws {
        guard case .object(let fields) = try? JSONValue(json: payload) else { throw ValidationError("--payload must be a JSON object") }
        let options = JobOptions(
            queue: queue, priority: priority, maxAttempts: maxAttempts, delaySeconds: delay, idempotencyKey: idempotencyKey, callbackUrl: callbackUrl,
            after: try after.map(Self.jobIDs))
        let job = try await connection.send(EnqueueRequest(kind: kind, payload: fields, options: options))
        print(job.isNew ? "\(job.jobId)" : "\(job.jobId) (existing job with this idempotency key)")
    }

    /// `41,42` as job ids.
    static func jobIDs(_ list: String) throws -> [Int64] {
        try list.split(separator: ",", omittingEmptySubsequences: false).map { part in
            guard let id = Int64(part.trimmingCharacters(in: .whitespaces)) else { throw ValidationError("--after must be job ids separated by commas, not '\(list)'") }
            return id
        }
    }
}

struct EnqueueGraph: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "enqueue-graph",
        abstract: "Enqueue jobs that run after one another (jobs.enqueueGraph) and print each one's id.",
        discussion: """
            The file holds the request's arguments: {"jobs": [{"name": "cutout", "kind": "…", "payload": {…}, \
            "after": ["normalise", 41]}, …], "idempotencyKey": "…"}; `after` names jobs of the graph and ids of \
            existing jobs (docs/protocol.md).
            """)
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "A JSON file, or - for standard input.") var file: String

    func run() async throws {
        let data = file == "-" ? FileHandle.standardInput.readDataToEndOfFile() : try Data(contentsOf: URL(fileURLWithPath: file))
        let request: EnqueueGraphRequest
        do { request = try JSONDecoder().decode(EnqueueGraphRequest.self, from: data) } catch {
            throw ValidationError("\(file) is not a graph: \(error)")
        }
        try printJSON(try await connection.send(request))
    }
}

struct Status: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print one job: state, attempts, every attempt's error.")
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The job id.") var id: Int64

    func run() async throws { try printJSON(try await connection.send(StatusRequest(jobId: id))) }
}

struct Wait: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Wait until a job ends (completed, dead or cancelled) and print it.",
        discussion: "Exits 0 when the job ended, 2 when the timeout passed first.")
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The job id.") var id: Int64
    @OptionGroup var timeout: WaitTimeout

    func run() async throws {
        let result = try await connection.send(WaitRequest(jobId: id, timeoutMs: timeout.milliseconds))
        try printJSON(result.job)
        if result.timedOut { throw ExitCode(2) }
    }
}

/// `--timeout` of the wait commands.
struct WaitTimeout: ParsableArguments {
    @Option(help: "Seconds to wait at most (up to \(WaitRequest.maxTimeoutMs / 1000)).") var timeout = 30.0

    var milliseconds: Int { Int((timeout * 1000).rounded()) }

    func validate() throws {
        guard (0...Double(WaitRequest.maxTimeoutMs) / 1000).contains(timeout) else {
            throw ValidationError("--timeout must be between 0 and \(WaitRequest.maxTimeoutMs / 1000) seconds")
        }
    }
}

struct Cancel: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Cancel a queued job, or ask the worker running it to stop.")
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The job id.") var id: Int64

    func run() async throws { try printJSON(try await connection.send(CancelRequest(jobId: id))) }
}

struct Stats: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Queue depth, lag and failures per kind; live workers, pauses, limits (a table; --json for scripts).")
    @OptionGroup var connection: ConnectionOptions
    @Option(help: "Count finished jobs over this many seconds.") var window = StatsRequest.defaultWindowSeconds
    @OptionGroup var output: OutputFormat

    func run() async throws { try output.print(try await connection.send(StatsRequest(windowSeconds: window)), table: StatsTable.text) }
}
