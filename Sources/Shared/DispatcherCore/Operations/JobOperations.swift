import FleetCallbacks
import FleetQueue
import Imaging
import Logging

extension OperationRegistry {
    /// Every job op: `ping`, `enqueue`, `jobs.enqueueGraph`, the image conveniences, `status`, `wait`, `cancel`, `stats`.
    /// (`auth` belongs to the connection, not the registry.) `profiles`: what `image.normalize`
    /// checks its `profile` against; `enqueuer`: where the single-job ops' job goes (the queue, or
    /// the group commit's `EnqueueBatcher`; graphs, `garment.process`'s included, go to `queue`); `outbound`: what `callbackUrl`s and `http.request` jobs are;
    /// `reads`: where `stats` reads (a replica's queue, or `queue`).
    public static func jobOperations(
        queue: JobQueue, reads: JobQueue? = nil, enqueuer: any JobEnqueuer, watcher: FinishWatcher, liveWorkerWithin: Duration, profiles: any NormalizeProfileSource,
        outbound: OutboundSettings = .off, logger: Logger
    ) -> [any DispatcherOperation] {
        let enqueue = EnqueueOperation(enqueuer: enqueuer, outbound: outbound)
        return [
            PingOperation(),
            enqueue,
            EnqueueGraphOperation(enqueue: enqueue, queue: queue),
            NormalizeImageOperation(enqueuer: enqueuer, profiles: profiles, outbound: outbound, logger: logger),
            ProcessGarmentOperation(queue: queue, outbound: outbound),
            PurgeAccountOperation(enqueuer: enqueuer, outbound: outbound),
            StatusOperation(queue: queue),
            WaitOperation(queue: queue, watcher: watcher),
            CancelOperation(queue: queue),
            StatsOperation(queue: reads ?? queue, liveWithin: liveWorkerWithin),
        ]
    }
}
