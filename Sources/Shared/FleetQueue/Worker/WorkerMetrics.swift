import Metrics

/// The worker's metric handles, made once per kind rather than once per job.
struct WorkerMetrics: Sendable {
    enum Outcome: String, CaseIterable, Sendable { case completed, retry, dead, cancelled, returned, deferred }

    private let claimed: [JobKind: Counter]
    private let duration: [JobKind: Timer]
    private let finished: [JobKind: [Outcome: Counter]]

    init(kinds: [JobKind]) {
        claimed = Dictionary(uniqueKeysWithValues: kinds.map {
            ($0, Counter(label: "fleet_jobs_claimed_total", dimensions: [("kind", $0.rawValue)]))
        })
        duration = Dictionary(uniqueKeysWithValues: kinds.map {
            ($0, Timer(label: "fleet_job_duration_seconds", dimensions: [("kind", $0.rawValue)]))
        })
        finished = Dictionary(uniqueKeysWithValues: kinds.map { kind in
            (kind, Dictionary(uniqueKeysWithValues: Outcome.allCases.map {
                ($0, Counter(label: "fleet_jobs_finished_total", dimensions: [("kind", kind.rawValue), ("outcome", $0.rawValue)]))
            }))
        })
    }

    func claimed(_ kind: JobKind, count: Int) { claimed[kind]?.increment(by: count) }
    func ran(_ kind: JobKind, for elapsed: Duration) { duration[kind]?.recordNanoseconds(Int64(elapsed.seconds * 1e9)) }
    func finished(_ kind: JobKind, _ outcome: Outcome) { finished[kind]?[outcome]?.increment() }
}
