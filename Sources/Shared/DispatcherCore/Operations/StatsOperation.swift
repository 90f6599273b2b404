import DispatcherProtocol
import FleetQueue
import Foundation

/// `stats`: depth, lag and failures per kind, the live workers, pauses and limits in force.
public struct StatsOperation: DispatcherOperation {
    public var access: OperationAccess { .readers }
    let queue: JobQueue
    /// A worker is live while its heartbeat is younger than this.
    let liveWithin: Duration

    public init(queue: JobQueue, liveWithin: Duration) {
        self.queue = queue
        self.liveWithin = liveWithin
    }

    public func run(_ request: StatsRequest) async throws -> QueueStats {
        let window = request.windowSeconds ?? StatsRequest.defaultWindowSeconds
        guard (1...7 * 86_400).contains(window) else { throw DispatcherError(.badArgument, "windowSeconds must be between 1 and 604800") }
        async let kinds = queue.stats(window: .seconds(window))
        async let workers = queue.liveWorkers(heartbeatWithin: liveWithin)
        let control = queue.control()
        async let pauses = control.pauses()
        async let limits = LimitView.all(control)
        let paused = try await pauses
        let pausedKinds = Set(paused.filter { $0.target.scope == .kind }.map(\.target.name))
        return QueueStats(windowSeconds: window, kinds: try await kinds.map { QueueStats.Kind($0, paused: pausedKinds.contains($0.kind.rawValue)) },
                          workers: try await workers.map { QueueStats.Worker($0, pausedKinds: pausedKinds) },
                          pauses: paused.map(QueueStats.Pause.init), limits: try await limits, serverTime: Date())
    }
}
