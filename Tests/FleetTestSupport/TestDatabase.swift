@testable import DispatcherCore
@testable import FleetAccess
import FleetPostgres
import FleetSchema
@testable import FleetQueue
import FleetSupport
import Foundation
import Glibc
import Logging

/// The package's root folder, found from this file's path.
let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

let testLogger: Logger = {
    var logger = Logger(label: "test")
    logger.logLevel = .critical
    return logger
}()

/// A PostgreSQL cluster started by the project's own `scripts/pg.sh`.
struct PostgresCluster: Sendable {
    let directory: String
    let port: Int

    /// The shared test cluster: `.data/test-postgres` on `FLEET_TEST_PG_PORT` (default 15330),
    /// started on first use unless `scripts/test.sh` already started it.
    static let shared = PostgresCluster(
        directory: packageRoot.appendingPathComponent(".data/test-postgres").path,
        port: ProcessInfo.processInfo.environment["FLEET_TEST_PG_PORT"].flatMap { Int($0) } ?? 15330)

    /// Runs `body` with a cluster of its own (for tests that restart the server), and stops
    /// and deletes that cluster afterwards, whatever `body` did.
    static func withPrivate(_ body: (PostgresCluster) async throws -> Void) async throws {
        let cluster = try await makePrivate()
        do {
            try await body(cluster)
        } catch {
            await cluster.destroy()
            throw error
        }
        await cluster.destroy()
    }

    private static func makePrivate() async throws -> PostgresCluster {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("fleet-pg-\(UUID().uuidString.prefix(8))").path
        let cluster = PostgresCluster(directory: directory, port: try freePort())
        try await cluster.start()
        return cluster
    }

    /// A fresh database with no tables.
    func makeEmptyDatabase() async throws -> String {
        if directory == PostgresCluster.shared.directory { await PostgresCluster.startSharedOnce() }
        let name = "t_\(UUID().uuidString.prefix(12).lowercased().replacingOccurrences(of: "-", with: ""))"
        try await PostgresConnection.connect(adminURL).query("CREATE DATABASE \(name)")
        return url(database: name)
    }

    /// Starts the shared cluster once per test run, unless the test script already did.
    private static let sharedStart = Task {
        if ProcessInfo.processInfo.environment["FLEET_TEST_PG_STARTED"] == nil { try await shared.start() }
    }

    static func startSharedOnce() async { _ = await sharedStart.result }

    var adminURL: String { "postgresql://postgres@127.0.0.1:\(port)/postgres" }

    func url(database: String) -> String { "postgresql://postgres@127.0.0.1:\(port)/\(database)" }

    func start() async throws { try await script("start") }
    /// pg_ctl's shutdown modes for a restart: `fast` (clients disconnected, a checkpoint) or
    /// `immediate` (no checkpoint, recovery at start, as after a crash).
    enum ShutdownMode: String { case fast, immediate }

    func restart(_ mode: ShutdownMode = .fast) async throws { try await script("restart", "--mode", mode.rawValue) }

    /// Stops the server, its folder kept: `start()` starts it again (a restart with time between).
    func stop(_ mode: ShutdownMode = .fast) async throws { try await script("stop", "--mode", mode.rawValue) }

    /// Stops the server and deletes its folder.
    func destroy() async {
        try? await script("stop")
        try? FileManager.default.removeItem(atPath: directory)
        try? FileManager.default.removeItem(atPath: directory + ".initdb.log")
    }

    private func script(_ command: String, _ options: String...) async throws {
        let log = temporaryPath("pg-script") + ".log"
        defer { try? FileManager.default.removeItem(atPath: log) }
        let status = try await ChildProcess.run(packageRoot.appendingPathComponent("scripts/pg.sh").path,
                                                [command, "--dir", directory, "--port", "\(port)", "--fast"] + options, outputPath: log)
        guard status == 0 else {
            let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            throw TestFailure("scripts/pg.sh \(command) exited \(status): \(output.suffix(1500))")
        }
    }

    /// A fresh, migrated database; each test gets its own so tests run in parallel.
    func makeDatabase() async throws -> String {
        let url = try await makeEmptyDatabase()
        try await Migrator(migrations: FleetSchema.migrations, logger: testLogger).migrate(conninfo: url)
        return url
    }
}

/// Where the driver's statements run. The contract suite runs each test each way, as River's
/// `riverdrivertest` does: on a pool, on one connection inside a transaction the test opens and
/// never commits (a caller enqueueing within its own unit of work), and on a pool through
/// PgBouncer in transaction mode with unnamed statements (the shared cluster's `PgBouncer`).
enum DriverExecutor: String, CaseIterable, Sendable {
    case pool, transaction, pgbouncer
}

/// A migrated database on the shared cluster, with a pool and a queue over it.
struct TestQueue: Sendable {
    let url: String
    let pool: PostgresPool
    let driver: PostgresQueueDriver
    let queue: JobQueue
    /// Where the test's own statements run: the driver's executor, so that inside a
    /// transaction they see its uncommitted rows.
    var sql: any PostgresExecutor { driver.executor }

    static func make(cluster: PostgresCluster = .shared, executor: DriverExecutor = .pool) async throws -> TestQueue {
        let url = try await cluster.makeDatabase()
        let pool = PostgresPool(conninfo: url, maxConnections: 10)
        let driver: PostgresQueueDriver
        switch executor {
        case .pool:
            driver = PostgresQueueDriver(executor: pool)
        case .transaction:
            let connection = try await PostgresConnection.connect(url)
            try await connection.query("BEGIN")
            driver = PostgresQueueDriver(executor: connection)
        case .pgbouncer:
            precondition(cluster.directory == PostgresCluster.shared.directory, "the shared PgBouncer forwards to the shared cluster")
            try await PgBouncer.startSharedOnce()
            driver = PostgresQueueDriver(executor: PostgresPool(
                conninfo: PgBouncer.shared.url(through: url), maxConnections: 10, statements: .unnamed))
        }
        return TestQueue(url: url, pool: pool, driver: driver, queue: JobQueue(driver: driver, knownKinds: FleetKinds.all))
    }

    /// Moves every job's clock back by `interval`, as if that much time had passed: delays,
    /// backoffs and leases run out without the test sleeping.
    func travelInTime(_ interval: Duration) async throws {
        try await sql.query("""
            UPDATE jobs SET run_at = run_at - make_interval(secs => $1),
                lease_expires_at = lease_expires_at - make_interval(secs => $1)
            """, [interval.seconds])
    }

    /// Counts of jobs per state.
    func states() async throws -> [JobState: Int] {
        var counts: [JobState: Int] = [:]
        for row in try await sql.query("SELECT state::text, count(*) AS n FROM jobs GROUP BY state").rows {
            counts[JobState(rawValue: try row.string("state"))!] = try row.int("n")
        }
        return counts
    }

    /// Waits until `condition` holds, polling; fails the test after `timeout`.
    func waitUntil(timeout: Duration = .seconds(60), _ what: String, _ condition: () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        while !(try await condition()) {
            guard ContinuousClock.now < deadline else { throw TestFailure("timed out waiting for \(what); states: \(try await states())") }
            try await Task.sleep(for: .milliseconds(50))
        }
    }
}

/// A loopback TCP port nothing listens on right now, asked of the kernel.
func freePort() throws -> Int {
    let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(socket) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, length) == 0 && getsockname(socket, $0, &length) == 0 }
    }
    guard bound else { throw TestFailure("no free port") }
    return Int(UInt16(bigEndian: address.sin_port))
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
