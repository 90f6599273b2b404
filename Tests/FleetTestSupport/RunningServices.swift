import DrillKinds
import FleetPostgres
@testable import FleetQueue
import FleetSupport
import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import Testing

/// Services running in this process as one group (stopped in reverse order), stopped by a graceful shutdown.
struct RunningService {
    let group: ServiceGroup
    let task: Task<Void, any Error>

    init(_ services: any Service...) {
        let group = ServiceGroup(configuration: .init(services: services.map { .init(service: $0) }, logger: testLogger))
        self.group = group
        task = Task { try await group.run() }
    }

    func stop() async throws {
        await group.triggerGracefulShutdown()
        try await task.value
    }
}

/// A worker runtime running in this process with a notifier of its own, as a worker process
/// runs them, stopped by a graceful shutdown.
struct RunningWorker {
    let runtime: WorkerRuntime
    let notifier: Notifier
    let running: RunningService

    init(_ q: TestQueue, handlers: [any JobHandler], concurrency: [JobKind: Int], grace: Duration = .seconds(5),
         pollInterval: Duration = .milliseconds(200)) {
        notifier = Notifier(conninfo: q.url, logger: testLogger)
        runtime = WorkerRuntime(
            executable: "test-worker",
            configuration: WorkerConfiguration(concurrency: concurrency, lease: .seconds(30), pollInterval: pollInterval,
                                               shutdownGrace: grace, retry: RetryPolicy(base: .milliseconds(20))),
            driver: q.driver, notifier: notifier, handlers: handlers, logger: testLogger)
        running = RunningService(notifier, runtime)
    }

    func stop() async throws { try await running.stop() }
}
