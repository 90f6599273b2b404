import ArgumentParser
import Foundation
import Logging
import FleetCommands
import Shared

@main
struct Dispatcher: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dispatcher",
        abstract: "The fleet's front door and clock: enqueue and status for backend services, queue maintenance.",
        discussion: settingsNote,
        subcommands: [Run.self, MigrateCommand.self, Enqueue.self, Job.self, Cancel.self],
        defaultSubcommand: Run.self)
}

struct Run: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the dispatcher: queue maintenance (rescue expired leases, sweep unknown kinds, prune).")

    func run() async throws {
        let settings = try FleetProcess.bootstrap()
        let logger = Logger(label: "dispatcher")
        try await FleetProcess.migrate(settings, logger: logger)
        let pool = PostgresPool(conninfo: settings.databaseURL, maxConnections: settings.poolSize, applicationName: "dispatcher")
        logger.info("dispatcher started")
        let maintenance = MaintenanceService(driver: PostgresQueueDriver(pool: pool), renders: RenderStore(pool: pool), logger: logger)
        try await FleetProcess.runServices([maintenance], logger: logger)
    }
}

/// Operator commands that talk to the database directly.
protocol QueueCommand: AsyncParsableCommand {}

extension QueueCommand {
    func withQueue<T: Sendable>(_ body: (JobQueue) async throws -> T) async throws -> T {
        let settings = try FleetProcess.bootstrap()
        let pool = PostgresPool(conninfo: settings.databaseURL, maxConnections: 1, applicationName: "dispatcher-cli")
        return try await body(JobQueue(driver: PostgresQueueDriver(pool: pool)))
    }
}

struct Enqueue: QueueCommand {
    static let configuration = CommandConfiguration(abstract: "Enqueue one job and print its id.")

    @Argument(help: "The job kind, e.g. drill.noop.") var kind: String
    @Option(help: "The payload, a JSON object.") var payload = "{}"
    @Option(help: "The queue.") var queue = "default"
    @Option(help: "Priority, 0 (first) to 9.") var priority = 2
    @Option(help: "Seconds to wait before the first run.") var delay = 0.0
    @Option(help: "Attempts before the job is dead.") var maxAttempts = 5
    @Option(help: "Enqueueing the same key again returns the first job.") var idempotencyKey: String?

    func run() async throws {
        let job = NewJob(kind: JobKind(rawValue: kind), payload: payload, queue: queue, priority: priority,
                         delay: .milliseconds(Int64(delay * 1000)), maxAttempts: maxAttempts, idempotencyKey: idempotencyKey)
        let enqueued = try await withQueue { try await $0.enqueue(job) }
        print(enqueued.isNew ? "\(enqueued.id)" : "\(enqueued.id) (existing job with this idempotency key)")
    }
}

struct Job: QueueCommand {
    static let configuration = CommandConfiguration(abstract: "Print one job's state, attempts and errors.")

    @Argument(help: "The job id.") var id: Int64

    func run() async throws {
        guard let job = try await withQueue({ try await $0.job(id: id) }) else {
            throw ValidationError("no job \(id)")
        }
        print("job \(job.id): \(job.kind) in \(job.queue), \(job.state.rawValue), attempt \(job.attempt)/\(job.maxAttempts)")
        if let result = job.result { print("result: \(result)") }
        for error in job.errors { print("attempt \(error.attempt) at \(error.at): \(error.code.map { "\($0): " } ?? "")\(error.error)") }
    }
}

struct Cancel: QueueCommand {
    static let configuration = CommandConfiguration(abstract: "Cancel a queued job, or ask the worker running it to stop.")

    @Argument(help: "The job id.") var id: Int64

    func run() async throws {
        switch try await withQueue({ try await $0.cancel(id: id) }) {
        case .cancelled: print("job \(id) cancelled")
        case .requested(let owner): print("job \(id) is running on \(owner ?? "?"); asked it to stop")
        case .alreadyFinished(let state): print("job \(id) had already ended: \(state.rawValue)")
        case .notFound: throw ValidationError("no job \(id)")
        }
    }
}
