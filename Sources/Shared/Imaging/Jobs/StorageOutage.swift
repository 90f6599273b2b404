import FleetQueue
import FleetStorage
import FleetSupport
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
/// write refused for an outage to the next write that succeeds, else 0); while one is on, the
/// handlers that share it give `/readyz` its reason (`unreadyReason`).
///
/// A worker process makes one and gives it to every handler that writes, so they share it.
public final class StorageOutage: Sendable {
    /// The outage going on: when its first write was refused, and the latest refusal's code.
    private struct Ongoing {
        let began: ContinuousClock.Instant
        var code: StorageFailureCode
    }

    let shortest: Duration
    let longest: Duration
    /// Nil: none is going on.
    private let ongoing = Mutex<Ongoing?>(nil)
    private let outage = Gauge(label: "fleet_storage_outage")

    public init(shortest: Duration = .seconds(1), longest: Duration = .seconds(30)) {
        self.shortest = shortest
        self.longest = longest
    }

    /// What a guarded call does to the store: only a write that succeeds ends an outage, since a
    /// store that is full or read-only still answers reads.
    public enum Access: Sendable { case read, write }

    /// Runs `body`, which reads or writes (`access`); a call the store refuses for an outage
    /// defers the job.
    public func deferringOutages<T>(_ access: Access, _ body: () async throws -> T) async throws -> T {
        let value: T
        do {
            value = try await body()
        } catch let failure as StorageFailure {
            guard let code = failure.code else { throw failure }
            throw JobDeferral.retryIn(refused(code), code: JobErrorCode(code), reason: failure.description)
        }
        if access == .write, ongoing.withLock({ ongoing in defer { ongoing = nil }; return ongoing != nil }) { outage.record(0) }
        return value
    }

    /// While writes are refused: what `/readyz` says (the code, and for how long); else nil.
    public var unreadyReason: String? {
        guard let ongoing = ongoing.withLock({ $0 }) else { return nil }
        let seconds = Int((ContinuousClock.now - ongoing.began).components.seconds)
        return "storage failing: writes refused (\(ongoing.code.rawValue)) for \(seconds) s; the jobs that write wait for it"
    }

    /// Counts one refusal; the wait before the job that met it writes again.
    func refused(_ code: StorageFailureCode, jitter: Double = Double.random(in: -0.25...0.25)) -> Duration {
        Counter(label: "fleet_storage_write_failures_total", dimensions: [("code", code.rawValue)]).increment()
        outage.record(1)
        let now = ContinuousClock.now
        let lasted = ongoing.withLock { ongoing in
            if ongoing == nil { ongoing = Ongoing(began: now, code: code) }
            ongoing!.code = code
            return now - ongoing!.began
        }
        return min(max(lasted, shortest), longest) * (1 + jitter)
    }
}
