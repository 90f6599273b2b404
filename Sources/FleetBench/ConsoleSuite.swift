import FleetAccess
import ArgumentParser
import DispatcherCore
import FleetHTTP
import FleetQueue
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Logging
import ServiceLifecycle

/// `fleet-bench console`: every page of the operator console on the ops suite's table of
/// 1,000,000 jobs, each fetched `--samples` times by a logged-in browser-like client over
/// loopback (the time is the whole round trip, so it bounds the server's time from above).
struct ConsoleSuite: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "console", abstract: "The operator console's pages on 1,000,000 jobs: p50 and p99 per page.")

    @OptionGroup var options: SuiteOptions
    @Option(help: "Jobs in the table.") var tableJobs = 1_000_000
    @Option(help: "Fetches per page and round.") var samples = 50

    func run() async throws {
        let database = try await BenchDatabase.prepare()
        progress("filling \(tableJobs) jobs")
        try await OpsSuite.fill(database, jobs: tableJobs)
        try await database.pool.query("VACUUM ANALYZE jobs")
        let console = try await ConsoleUnderTest.start(database)
        defer { console.stop() }
        let pages = try await console.pages()
        var report = Report()
        for round in 1...max(1, options.repeats) {
            progress("round \(round)/\(options.repeats)")
            for (name, path) in pages {
                var latencies: [Double] = []
                for _ in 0..<samples {
                    let started = ContinuousClock.now
                    try await console.browser.get(path)
                    latencies.append((ContinuousClock.now - started).seconds * 1000)
                }
                latencies.sort()
                report.add("console.p50.\(name)", percentile(latencies, 0.50), unit: "ms")
                report.add("console.p99.\(name)", percentile(latencies, 0.99), unit: "ms")
            }
        }
        await console.shutdown()
        if options.json {
            printJSONLines(report.medians)
        } else {
            printTable(title: "console suite: medians of \(options.repeats) runs on \(tableJobs) jobs", peerName: "-", rows: pages.flatMap { name, _ in
                let p99 = report.median("console.p99.\(name)")
                return [
                    Comparison(name: "p50 \(name)", unit: "ms", fleet: report.median("console.p50.\(name)"), peer: nil, lowerIsBetter: true,
                               target: "-", met: nil),
                    Comparison(name: "p99 \(name)", unit: "ms", fleet: p99, peer: nil, lowerIsBetter: true, target: "<= 100", met: p99.map { $0 <= 100 }),
                ]
            }, notes: [
                "each page fetched \(samples) times per round over loopback by a logged-in client (round trip: an upper bound of the server's time)",
                "server: \(try await database.settings())",
            ])
        }
    }
}

/// The operator console on the bench's database, served on a loopback port, and a client logged in to it.
struct ConsoleUnderTest {
    static let token = "fleet-bench-console-token-0123456789"
    let browser: ConsoleBrowser
    let database: BenchDatabase
    private let group: ServiceGroup
    private let running: Task<Void, any Error>

    static func start(_ database: BenchDatabase) async throws -> ConsoleUnderTest {
        let logger = Logger(label: "fleet-bench")
        let tokens = AccessTokens(environmentToken: token, store: nil, logger: logger)
        let routes = ConsoleRoutes(settings: ConsoleSettings(enabled: true), pool: database.pool, tokens: tokens,
                                   schedule: try MaintenanceTasks.schedule(from: [:]), liveWorkerWithin: .seconds(90), logger: logger)
        let listener = HTTPListener(address: ListenAddress(host: "127.0.0.1", port: 0), routes: [routes], logger: logger)
        let group = ServiceGroup(configuration: .init(services: [.init(service: listener)], logger: logger))
        let running = Task { try await group.run() }
        guard let port = await listener.boundPort() else {
            running.cancel()
            throw BenchError("the console's listener did not start")
        }
        let browser = try await ConsoleBrowser.login(base: "http://127.0.0.1:\(port)", token: token)
        return ConsoleUnderTest(browser: browser, database: database, group: group, running: running)
    }

    /// Every page, by name and path; the job page shows the newest dead job.
    func pages() async throws -> [(name: String, path: String)] {
        let sampleJob = try await database.pool.query("SELECT max(id) AS id FROM jobs WHERE state = 'dead'").rows[0].int64("id")
        return [
            ("overview", "/console"), ("overview_live", "/console/live/overview"), ("jobs", "/console/jobs"),
            ("jobs_dead_of_kind", "/console/jobs?state=dead&kind=garment.cutout"), ("job", "/console/jobs/\(sampleJob)"),
            ("dead", "/console/dead"), ("queues", "/console/queues"), ("workers", "/console/workers"), ("schedule", "/console/schedule"),
            ("renders", "/console/renders"), ("audit", "/console/audit"),
        ]
    }

    func shutdown() async {
        await group.triggerGracefulShutdown()
        _ = await running.result
    }

    /// For a suite leaving by an error: ends the listener without waiting.
    func stop() { running.cancel() }
}

/// A logged-in client of the console: URLSession keeps the cookies and follows the 303s, as a browser does.
struct ConsoleBrowser: Sendable {
    let base: String
    let session: URLSession

    static func login(base: String, token: String) async throws -> ConsoleBrowser {
        let session = URLSession(configuration: .ephemeral)
        let browser = ConsoleBrowser(base: base, session: session)
        let form = try await browser.get("/console/login")
        guard let start = form.range(of: "name=\"csrf\" value=\"")?.upperBound else { throw BenchError("no login form") }
        let csrf = form[start...].prefix { $0 != "\"" }
        var request = URLRequest(url: URL(string: base + "/console/login")!)
        request.httpMethod = "POST"
        request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data("csrf=\(csrf)&token=\(token)".utf8)
        let (body, response) = try await session.data(for: request)
        guard (response as? HTTPURLResponse)?.statusCode == 200, String(decoding: body, as: UTF8.self).contains("Overview") else {
            throw BenchError("the console login failed")
        }
        return browser
    }

    @discardableResult
    func get(_ path: String) async throws -> String {
        let (body, response) = try await session.data(from: URL(string: base + path)!)
        guard let status = (response as? HTTPURLResponse)?.statusCode, status == 200, response.url?.path != "/console/login" || path == "/console/login" else {
            throw BenchError("GET \(path): \((response as? HTTPURLResponse)?.statusCode ?? 0)")
        }
        return String(decoding: body, as: UTF8.self)
    }
}
