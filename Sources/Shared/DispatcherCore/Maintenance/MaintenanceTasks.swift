import FleetPostgres
import FleetQueue
import Logging
import Providers
import Renders

/// The built-in tasks the schedule can name, each one maintenance service (one file each), and
/// the schedule they run on unless configured otherwise.
public struct MaintenanceTasks: Sendable {
    let rescuer: Rescuer
    let sweeper: UnknownKindSweeper
    let pruner: Pruner
    let countFolder: JobCountFolder
    let renderTimeouts: RenderTimeoutSweeper
    let tokens: TokenExpirer

    /// `providers` cancel the provider jobs of renders swept for their deadline.
    public init(pool: PostgresPool, providers: ProviderCatalog, logger: Logger) {
        self.rescuer = Rescuer(executor: pool, logger: logger)
        self.sweeper = UnknownKindSweeper(executor: pool, knownKinds: FleetKinds.all, logger: logger)
        self.pruner = Pruner(executor: pool, logger: logger)
        self.countFolder = JobCountFolder(executor: pool)
        self.renderTimeouts = RenderTimeoutSweeper(store: RenderStore(pool: pool), providers: providers, logger: logger)
        self.tokens = TokenExpirer(pool: pool, logger: logger)
    }

    /// The built-in schedule; configuration overrides or disables entries by name.
    public static let defaultSchedule: [ScheduleEntry] = {
        let table: [(String, MaintenanceTask)] = [
            ("*/5 * * * * *", RenderTimeoutSweeper.task),
            ("*/5 * * * * *", .countsFold),
            ("*/15 * * * * *", .leasesRescue),
            ("* * * * *", .kindsSweep),
            ("*/5 * * * *", TokenExpirer.task),
            ("17 * * * *", .jobsPrune),
        ]
        // Constant expressions; a test parses them.
        return table.map { ScheduleEntry(expression: try! CronExpression($0.0), target: .task($0.1)) }
    }()

    /// What the dispatcher's schedule may name.
    public static let vocabulary = ScheduleVocabulary(tasks: Set(defaultSchedule.compactMap(\.task)), kinds: FleetKinds.all)

    /// The schedule: the defaults with `FLEET_SCHEDULE_FILE` and `FLEET_SCHEDULE` applied.
    public static func schedule(from environment: [String: String]) throws -> ScheduleSettings {
        try ScheduleSettings.load(from: environment, defaults: defaultSchedule, vocabulary: vocabulary)
    }

    /// Runs one task; returns how many items it handled.
    public func run(_ task: MaintenanceTask) async throws -> Int {
        switch task {
        case .leasesRescue: await rescuer.runOnce()
        case .kindsSweep: try await sweeper.runOnce().count
        case .jobsPrune: try await pruner.runOnce()
        case .countsFold: try await countFolder.runOnce()
        case RenderTimeoutSweeper.task: try await renderTimeouts.runOnce().count
        case TokenExpirer.task: try await tokens.runOnce()
        default: throw UnknownTask(task: task)
        }
    }

    /// A task name the vocabulary holds but `run` does not: a programming error, reported as the
    /// slot's failure rather than a crash.
    struct UnknownTask: Error, CustomStringConvertible {
        let task: MaintenanceTask
        var description: String { "no maintenance service runs \(task)" }
    }
}

extension ScheduleEntry {
    /// The built-in task this entry runs, if it runs one.
    var task: MaintenanceTask? { if case .task(let task) = target { task } else { nil } }
}
