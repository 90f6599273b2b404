import FleetPostgres
import FleetQueue
import Logging
import Renders

/// The built-in tasks the schedule can name, each one maintenance service (one file each).
public struct MaintenanceTasks: Sendable {
    let rescuer: Rescuer
    let sweeper: UnknownKindSweeper
    let pruner: Pruner
    let renderTimeouts: RenderTimeoutSweeper
    let tokens: TokenExpirer

    public init(pool: PostgresPool, logger: Logger) {
        let driver = PostgresQueueDriver(pool: pool)
        self.rescuer = Rescuer(driver: driver, logger: logger)
        self.sweeper = UnknownKindSweeper(driver: driver, logger: logger)
        self.pruner = Pruner(driver: driver, logger: logger)
        self.renderTimeouts = RenderTimeoutSweeper(store: RenderStore(pool: pool), logger: logger)
        self.tokens = TokenExpirer(pool: pool, logger: logger)
    }

    /// Runs one task; returns how many items it handled.
    public func run(_ task: MaintenanceTask) async throws -> Int {
        switch task {
        case .leasesRescue: await rescuer.runOnce()
        case .kindsSweep: try await sweeper.runOnce().count
        case .jobsPrune: try await pruner.runOnce()
        case .rendersTimeout: try await renderTimeouts.runOnce().count
        case .tokensExpire: try await tokens.runOnce()
        }
    }
}
