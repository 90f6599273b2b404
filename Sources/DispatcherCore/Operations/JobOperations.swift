import FleetQueue
import Imaging
import Logging

extension OperationRegistry {
    /// Every job op: `ping`, `enqueue`, the image conveniences, `status`, `wait`, `cancel`, `stats`.
    /// (`auth` belongs to the connection, not the registry.) `profiles`: what `image.normalize`
    /// checks its `profile` against.
    public static func jobOperations(
        queue: JobQueue, watcher: FinishWatcher, liveWorkerWithin: Duration, profiles: any NormalizeProfileSource, logger: Logger
    ) -> [any DispatcherOperation] {
        [
            PingOperation(),
            EnqueueOperation(queue: queue),
            NormalizeImageOperation(queue: queue, profiles: profiles, logger: logger),
            ProcessGarmentOperation(queue: queue),
            PurgeAccountOperation(queue: queue),
            StatusOperation(queue: queue),
            WaitOperation(queue: queue, watcher: watcher),
            CancelOperation(queue: queue),
            StatsOperation(queue: queue, liveWithin: liveWorkerWithin),
        ]
    }
}
