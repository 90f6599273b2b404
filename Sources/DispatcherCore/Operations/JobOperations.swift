import FleetQueue

extension OperationRegistry {
    /// Every job op: `ping`, `enqueue`, the image conveniences, `status`, `wait`, `cancel`, `stats`.
    /// (`auth` belongs to the connection, not the registry.)
    public static func jobOperations(queue: JobQueue, watcher: FinishWatcher, liveWorkerWithin: Duration) -> [any DispatcherOperation] {
        [
            PingOperation(),
            EnqueueOperation(queue: queue),
            NormalizeImageOperation(queue: queue),
            ProcessGarmentOperation(queue: queue),
            PurgeAccountOperation(queue: queue),
            StatusOperation(queue: queue),
            WaitOperation(queue: queue, watcher: watcher),
            CancelOperation(queue: queue),
            StatsOperation(queue: queue, liveWithin: liveWorkerWithin),
        ]
    }
}
