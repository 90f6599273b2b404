import FleetQueue
import FleetStorage
import Metrics
import Synchronization

extension JobErrorCode {
    /// The job error code of a storage outage (`STORAGE_FULL`, `STORAGE_UNAVAILABLE`, `STORAGE_DENIED`).
    public init(_ code: StorageFailureCode) { self.init(rawValue: code.rawValue) }
}

/// A storage outage (the store full, read-only, gone or refusing: `StorageFailureCode`) is the
/// infrastructure's fault, as the database being down is: the job that meets one is deferred
/// (`JobDeferral.retryIn`, its attempt not counted, the code in its errors) instead of spending
/// its attempts. The process's jobs that write share one outage: each waits about as long as the
/// outage has lasted so far (at least 1 s, at most 30 s, ±25 %), so an outage of minutes costs a
/// job a handful of tries, and the jobs run within 30 s of the space coming back; the first write
/// that succeeds ends the outage (`docs/images.md`, "Storage outages").
///
/// Metrics: `fleet_storage_write_failures_total{code}`, and `fleet_storage_outage` (1 from a
/// write refused for an outage to the next write that succeeds, else 0).
public final class StorageOutage: Sendable {
    /// The process's: every handler that writes shares it.
    public static let shared = StorageOutage()

    let shortest: Duration
    let longest: Duration
    /// When the first write of the outage was refused; nil: none is going on.
    private let began = Mutex<ContinuousClock.Instant?>(nil)
    private let outage = Gauge(label: "fleet_storage_outage")

    public init(shortest: Duration = .seconds(1), longest: Duration = .seconds(30)) {
        self.shortest = shortest
        self.longest = longest
    }

    /// Runs `body`, which writes; a write the store refuses for an outage defers the job.
    public func deferringOutages<T>(_ body: () async throws -> T) async throws -> T {
        let value: T
        do {
            value = try await body()
        } catch let failure as StorageFailure {
            guard let code = failure.code else { throw failure }
            throw JobDeferral.retryIn(refused(code), code: JobErrorCode(code), reason: failure.description)
        }
        if began.withLock({ began in defer { began = nil }; return began != nil }) { outage.record(0) }
        return value
    }

    /// Counts one refusal; the wait before the job that met it writes again.
    func refused(_ code: StorageFailureCode, jitter: Double = Double.random(in: -0.25...0.25)) -> Duration {
        Counter(label: "fleet_storage_write_failures_total", dimensions: [("code", code.rawValue)]).increment()
        outage.record(1)
        let now = ContinuousClock.now
        let lasted = began.withLock { began in
            if began == nil { began = now }
            return now - began!
        }
        return min(max(lasted, shortest), longest) * (1 + jitter)
    }
}
