import Logging
import ServiceLifecycle

/// Runs the queue's maintenance on fixed intervals: rescue expired leases, sweep unknown
/// kinds, prune finished jobs, time out renders past their deadline. Each step is safe with
/// any number of processes running it.
public struct MaintenanceService: Service {
    let rescuer: Rescuer
    let sweeper: UnknownKindSweeper
    let pruner: Pruner
    let renderTimeouts: RenderTimeoutSweeper?
    let logger: Logger

    public init(driver: any QueueDriver, renders: RenderStore? = nil, logger: Logger) {
        self.rescuer = Rescuer(driver: driver, logger: logger)
        self.sweeper = UnknownKindSweeper(driver: driver, logger: logger)
        self.pruner = Pruner(driver: driver, logger: logger)
        self.renderTimeouts = renders.map { RenderTimeoutSweeper(store: $0, logger: logger) }
        self.logger = logger
    }

    public func run() async throws {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await repeatEvery(.seconds(15)) { await rescuer.runOnce() } }
            group.addTask { await repeatEvery(.seconds(60)) { await log { try await sweeper.runOnce() } } }
            group.addTask { await repeatEvery(.seconds(600)) { await log { try await pruner.runOnce() } } }
            if let renderTimeouts {
                group.addTask { await repeatEvery(.seconds(5)) { await log { try await renderTimeouts.runOnce() } } }
            }
            try? await gracefulShutdown()
            group.cancelAll()
        }
    }

    private func log(_ step: () async throws -> some Any) async {
        do { _ = try await step() } catch { logger.error("maintenance step failed", metadata: ["error": "\(error)"]) }
    }
}

/// Runs `body` every `interval` (±10 % jitter, so processes do not synchronise) until cancelled.
public func repeatEvery(_ interval: Duration, _ body: @Sendable () async -> Void) async {
    while !Task.isCancelled {
        do { try await Task.sleep(for: interval * Double.random(in: 0.9...1.1)) } catch { return }
        await body()
    }
}
