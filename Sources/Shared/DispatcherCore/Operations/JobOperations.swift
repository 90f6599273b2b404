import FleetCallbacks
import FleetQueue
import Imaging
import Logging

extension OperationRegistry {
    /// Every job op: `ping`, `enqueue`, `jobs.enqueueGraph`, the image conveniences, `status`, `wait`, `cancel`, `stats`.
    /// (`auth` belongs to the connection, not the registry.) `profiles`: what `image.normalize`
    /// checks its `profile` against; `outbound`: what `callbackUrl`s and `http.request` jobs are.
    public static func jobOperations(
        queue: JobQueue, watcher: FinishWatcher, liveWorkerWithin: Duration, profiles: any NormalizeProfileSource,
        outbound: OutboundSettings = .off, logger: Logger
    ) -> [any DispatcherOperation] {
        let enqueue = EnqueueOperation(queue: queue, outbound: outbound)
        return [
            PingOperation(),
            enqueue,
            EnqueueGraphOperation(enqueue: enqueue),
            NormalizeImageOperation(queue: queue, profiles: profiles, outbound: outbound, logger: logger),
            ProcessGarmentOperation(queue: queue, outbound: outbound),
            PurgeAccountOperation(queue: queue, outbound: outbound),
            StatusOperation(queue: queue),
            WaitOperation(queue: queue, watcher: watcher),
            CancelOperation(queue: queue),
            StatsOperation(queue: queue, liveWithin: liveWorkerWithin),
        ]
    }
}
