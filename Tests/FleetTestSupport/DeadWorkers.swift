import DrillKinds
import FakeProviders
import FleetPostgres
@testable import FleetQueue
import FleetSupport
import Foundation
@testable import Providers
import Renders
import Testing

extension TestQueue {
    /// The pid in a worker id (`executable@host:pid:suffix`), the jobs' `lease_owner`.
    static func pid(ofWorker id: String) -> pid_t? {
        let parts = id.split(separator: ":")
        return parts.count >= 3 ? pid_t(parts[parts.count - 2]) : nil
    }

    /// The process running `job` now, if any.
    func leaseOwnerPID(of job: Int64) async throws -> pid_t? {
        try await sql.query("SELECT lease_owner FROM jobs WHERE id = $1", [job]).rows.first?["lease_owner"].flatMap(Self.pid(ofWorker:))
    }

    /// Whether the worker process `pid` holds its lock and recorded it on this server run (`WorkerLock`).
    func workerLocked(pid: pid_t) async throws -> Bool {
        // After a restart the pool's first connections find their link gone: tried again.
        try await sql.withRetry { connection in
            try await connection.query("""
                SELECT id FROM workers WHERE stopped_at IS NULL AND lock_server_start = pg_postmaster_start_time()
                """).rows
        }.contains { Self.pid(ofWorker: try $0.string("id")) == pid }
    }

    func waitUntilLocked(_ workers: [WorkerProcess]) async throws {
        try await waitUntil(timeout: .seconds(60), "the workers' locks") {
            for worker in workers where !(try await workerLocked(pid: worker.pid)) { return false }
            return true
        }
    }

    /// SIGKILLs `victim`, then returns how long until `condition` held (`waitFor`; a
    /// figure to print, not to bound: the tests' leases make anything but the lock take an hour);
    /// fails after `limit`, which only tells a hang.
    func kill(_ victim: WorkerProcess, thenTimeUntil what: String, limit: Duration = .seconds(120),
              _ condition: () async throws -> Bool) async throws -> Duration {
        let killed = ContinuousClock.now
        victim.signal(SIGKILL)
        try await waitFor("\(what) after the SIGKILL", timeout: limit, condition)
        return ContinuousClock.now - killed
    }
}

extension WorkerProcess {
    var pid: pid_t { child.pid }
}

/// The dispatcher's reaper running in this test process, as a dispatcher runs it; every 500 ms
/// unless told (the default is 1 s, which `aKilledWorkersJobIsClaimedByAnotherThroughItsLock`
/// uses with the real dispatcher).
struct RunningReaper {
    private let task: Task<Void, Never>

    init(_ driver: PostgresQueueDriver, interval: Duration = .milliseconds(500)) {
        let reaper = WorkerReaper(driver: driver, interval: interval, logger: testLogger)
        task = Task { await repeatEvery(interval) { await reaper.runOnce() } }
    }

    func stop() { task.cancel() }
}
