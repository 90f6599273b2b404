import ArgumentParser
import DispatcherCore
import FakeProviders
import FleetHTTPClient
import FleetObjectStore
import FleetPostgres
import FleetQueue
import FleetStorage
import FleetSupport
import Foundation
import Hummingbird
import Imaging
import Logging
import Providers
import Renders

/// `fleet-bench render`: one `render-worker` process keeps `--in-flight` renders going against
/// fal's queue API on a fake with a fixed latency, completed by signed webhooks (verified and
/// stored by the dispatcher's own webhook routes). A closed loop, ramped up over one latency,
/// requests a new render as each ends, so the in-flight count stays put; the rate is compared
/// with the ideal in-flight / latency. With `--storage both` the worker keeps its images in local
/// files and in the S3 gateway of `scripts/s3.sh` by turns, in the same run (the order swapped
/// every round), the same loop and fake provider serving both.
struct RenderSuite: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "render",
        abstract: "Render throughput and the fleet's own overhead per render against a fake provider with fixed latency.")

    @OptionGroup var options: SuiteOptions
    @Option(help: "Renders kept in flight.") var inFlight = 500
    @Option(help: "The fake provider's latency per render, in seconds.") var latency = 5.0
    @Option(help: "Seconds measured per repeat (after one latency of warm-up).") var seconds = 20.0
    @Option(help: "A fleet-wide limit on the provider's renders running at once (docs/renders.md): throughput should be limit / latency, renders that could not finish answered RENDER_BUSY at once.")
    var providerLimit: Int?
    @Option(help: "Users the renders are spread over, round robin, each with credits (1: every render contends for one user's credits).")
    var users = 1000
    @Flag(help: "Measure what a render costs PostgreSQL instead of the rate: per render, the transactions (xact_commit), WAL and server CPU, and the statements by total time. The benchmark reads nothing meanwhile (it learns of each end from fleet_renders_finished); the fleet's idle background is measured apart and taken out.")
    var cost = false
    @Option(help: "With --cost: seconds the fleet idles, to measure its background (polls, heartbeats, admission's estimate).")
    var idleSeconds = 10.0
    @Option(help: "Where the render worker keeps the images: files, s3 (the gateway of scripts/s3.sh), or both (alternating by round, each measured with the same loop; metrics named render.files.* and render.s3.*).")
    var storage: RenderStorageChoice = .files
    @Flag(help: "With s3: the worker reaches the gateway through a proxy that counts the requests per render (a hop more on the path: the overhead is not measured then for the target).")
    var countRequests = false
    @OptionGroup var gatewayOptions: GatewayOptions

    func run() async throws {
        let stores = storage.stores
        if cost && stores.count > 1 { throw ValidationError("--cost measures one store: --storage files or s3") }
        if countRequests && stores != [.s3] { throw ValidationError("--count-requests counts at the gateway: --storage s3") }
        let database = try await BenchDatabase.prepare()
        progress("database: \(try await database.settings())")
        let gateway = stores.contains(.s3) ? try await gatewayOptions.start() : nil
        let images = BenchStores(name: "render", gateway: gateway?.connection)
        defer { images.removeFiles() }
        // One owner's photos, which every render uses: a body photo and a processed garment (its
        // photo and its cut-out, as `garment.process` leaves them).
        let cutout = try await LocalBackgroundRemover().cutout(of: FakeImages.jpeg)
        for store in stores {
            let owner = try StorageID("bench")
            try await images.storage(store).write(FakeImages.jpeg, to: .bodyPhoto(user: owner, photo: StorageID("b1")))
            try await images.storage(store).write(FakeImages.jpeg, to: .garment(user: owner, garment: StorageID("g1")))
            try await images.storage(store).write(cutout, to: .garmentCutout(user: owner, garment: StorageID("g1")))
        }
        try await RenderSettings(provider: FashnProvider.name, enabledCategories: Set(GarmentCategory.allCases)).save(to: database.pool)
        try await database.pool.query(
            "INSERT INTO credits (user_id, total_granted) SELECT 'bench-' || n, 100000000 FROM generate_series(1, $1::integer) AS n", [users])
        if let providerLimit {
            try await JobControl(executor: database.pool).setLimit(
                ConcurrencyLimit(key: RenderCapacity.providerKey(FashnProvider.name), maxRunning: providerLimit), actor: "fleet-bench")
        }

        // Requests and webhooks are the dispatcher's work: they get a pool of its default size,
        // apart from the loop's own reads, as they would in production.
        let dispatcherPool = PostgresPool(conninfo: database.url, maxConnections: 8, applicationName: "fleet-bench-dispatcher")
        let http = CurlHTTPClient(maxConnectionsPerHost: 1024)
        let fal = try await FakeFal.start(webhookClient: http, recordRequests: false)
        fal.update { $0.latency = .milliseconds(Int64(latency * 1000)) }
        let receiver = try await webhookReceiver(store: RenderStore(pool: dispatcherPool), http: http, jwksURL: fal.jwksURL)
        let proxy = countRequests ? try await S3FaultProxy.start(before: gateway!.connection.endpoint) : nil
        let startWorker = { (store: BenchStore) in
            try ChildProcess(
                URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("render-worker").path, [],
                environment: images.environment(store, endpointURL: proxy?.server.baseURL).merging([
                    "DATABASE_URL": database.url, "FAL_KEY": fal.key, "FAL_QUEUE_URL": fal.baseURL,
                    "FLEET_RENDER_WEBHOOK_URL": "\(receiver.baseURL)/webhooks/fal", "FLEET_CONCURRENCY": "render.run=\(inFlight + 100)",
                    "FLEET_DB_POOL_SIZE": "16", "FLEET_LOG_LEVEL": "warning", "FLEET_POLL_INTERVAL_MS": "200",
                ]) { $1 },
                outputPath: NSTemporaryDirectory() + "fleet-bench-render-worker.log")
        }

        var report = Report()
        var logger = Logger(label: "fleet-bench.render")
        logger.logLevel = .warning
        // As the dispatcher admits renders: on the estimate one service keeps.
        let admission = RenderAdmission(pool: dispatcherPool)
        let admitting = Task { await admission.run() }
        defer { admitting.cancel() }
        let loop = ClosedLoop(requests: RenderRequests(pool: dispatcherPool, admission: admission), pool: database.pool, conninfo: database.url, inFlight: inFlight, users: users, logger: logger)
        /// One metric's name: the store's in it when two are measured.
        let metric = { (name: String, store: BenchStore) in stores.count > 1 ? "render.\(store.rawValue).\(name)" : "render.\(name)" }
        let stopWorker = { (worker: ChildProcess, store: BenchStore) in
            worker.signal(SIGTERM)
            _ = await worker.wait(timeout: .seconds(40))
            report.add(metric("worker_rss", store), Double(worker.peakRSSKilobytes ?? 0) / 1024, unit: "MB")
        }
        if cost {
            let worker = try startWorker(stores[0])
            progress("ramping up to \(inFlight) renders in flight over \(latency) s, then warming up for \(latency) s")
            try await loop.ramp(over: .milliseconds(Int64(latency * 1000)))
            try await loop.run(for: .milliseconds(Int64(latency * 1000)))
            let measured = try await RenderCostRun(
                loop: loop, meter: try await ServerCostMeter.connect(database.url), idleSeconds: idleSeconds, seconds: seconds,
                latency: latency, repeats: options.repeats
            ).run()
            await loop.stop()
            worker.signal(SIGTERM)
            _ = await worker.wait(timeout: .seconds(40))
            await receiver.stop()
            await fal.stop()
            await gateway?.stopIfStarted()
            try await loop.checkAllComplete()
            try await loop.checkCredits()
            measured.print(json: options.json, title: "render cost: \(inFlight) in flight, provider latency \(latency) s, medians of \(options.repeats)")
            return
        }
        // The worker changes store only between rounds' halves: the loop drains, the worker on the
        // other store stops, one on this store starts, the loop fills again and warms up.
        var running: (store: BenchStore, worker: ChildProcess)?
        for round in 1...options.repeats {
            // Swapped every round, so a drift of the machine's load favours neither store.
            for store in round.isMultiple(of: 2) ? stores.reversed() : stores {
                if running?.store != store {
                    if let (previous, worker) = running {
                        try await loop.drain(timeout: .seconds(latency * 4 + 60))
                        await stopWorker(worker, previous)
                    }
                    progress("\(store.rawValue): ramping up to \(inFlight) renders in flight over \(latency) s, then warming up for \(latency) s")
                    let first = running == nil
                    running = (store, try startWorker(store))
                    if first {
                        try await loop.ramp(over: .milliseconds(Int64(latency * 1000)))
                    } else {
                        try await loop.fill(over: .milliseconds(Int64(latency * 1000)))
                    }
                    try await loop.run(for: .milliseconds(Int64(latency * 1000)))
                }
                let window = try await loop.measure(
                    for: .milliseconds(Int64(seconds * 1000)), latency: latency, providerTime: { fal.providerTime(of: $0) })
                guard window.rate > 0 else { throw BenchError("no render completed in \(seconds) s") }
                report.add(metric("rate", store), window.rate, unit: "renders/s")
                // Behind a provider limit a render may wait longer than the window for its slot.
                if !window.overheads.isEmpty {
                    let sorted = window.overheads.sorted()
                    report.add(metric("overhead_p50", store), percentile(sorted, 0.50), unit: "ms")
                    report.add(metric("overhead_p99", store), percentile(sorted, 0.99), unit: "ms")
                    let nominal = window.nominalOverheads.sorted()
                    report.add(metric("overhead_nominal_p50", store), percentile(nominal, 0.50), unit: "ms")
                    report.add(metric("overhead_nominal_p99", store), percentile(nominal, 0.99), unit: "ms")
                }
                if !window.busy.isEmpty {
                    let busy = window.busy.sorted()
                    report.add(metric("busy_per_s", store), Double(busy.count) / seconds, unit: "refusals/s")
                    report.add(metric("busy_p50", store), percentile(busy, 0.50), unit: "ms")
                    report.add(metric("busy_p99", store), percentile(busy, 0.99), unit: "ms")
                }
                progress("round \(round)/\(options.repeats), \(store.rawValue): \(String(format: "%.1f", window.rate)) renders/s, \(window.overheads.count) renders")
            }
        }
        if let proxy {
            // Every render requested ends before the count: requests ÷ renders is exact.
            try await loop.drain(timeout: .seconds(latency * 4 + 60))
            let requests = proxy.takeRequests().filter { !$0.key.contains(".fleet-probe/") }.countsByKind()
            let renders = try await database.pool.query("SELECT count(*) AS n FROM renders WHERE status = 'complete'").rows[0].int("n")
            for kind in S3RequestKind.allCases {
                report.add("render.requests.\(kind.rawValue.lowercased())", Double(requests[kind, default: 0]) / Double(max(1, renders)), unit: "requests/render")
            }
            await proxy.stop()
        }
        await loop.stop()
        if let (store, worker) = running { await stopWorker(worker, store) }
        await receiver.stop()
        await fal.stop()
        try await loop.checkCredits()
        await gateway?.stopIfStarted()

        let ideal = Double(min(inFlight, providerLimit ?? inFlight)) / latency
        if options.json {
            printJSONLines(report.medians + [Measurement(metric: "render.ideal_rate", value: ideal, unit: "renders/s")])
            return
        }
        let limited = providerLimit.map { ", provider limit \($0)" } ?? ""
        for store in stores {
            let rate = report.median(metric("rate", store))
            let p99 = report.median(metric("overhead_p99", store))
            let rss = report.median(metric("worker_rss", store))
            let busyP99 = report.median(metric("busy_p99", store))
            // The image store's own round trips (reads of the photos, the result's write) are in
            // the overhead: the S3 store's target is the issue's, the files' the suite's own.
            let overheadTarget = store == .s3 ? 100.0 : 50.0
            printTable(title: "render suite (images in \(store.rawValue)): \(inFlight) in flight\(limited), provider latency \(latency) s, medians of \(options.repeats)",
                       peerName: "ideal", rows: [
                Comparison(name: "renders per second", unit: "renders/s", fleet: rate, peer: ideal, lowerIsBetter: false,
                           target: providerLimit == nil ? "≥ 0.95x ideal" : "ideal ± 5 %",
                           met: rate.map { providerLimit == nil ? $0 >= 0.95 * ideal : abs($0 - ideal) <= 0.05 * ideal }),
                Comparison(name: "RENDER_BUSY p99", unit: "ms", fleet: busyP99, peer: nil, lowerIsBetter: true,
                           target: "≤ 20 ms", met: busyP99.map { $0 <= 20 }),
                Comparison(name: "RENDER_BUSY per second", unit: "refusals/s", fleet: report.median(metric("busy_per_s", store)), peer: nil,
                           lowerIsBetter: true, target: "-", met: nil),
                Comparison(name: "overhead p50", unit: "ms", fleet: report.median(metric("overhead_p50", store)), peer: nil, lowerIsBetter: true,
                           target: "-", met: nil),
                Comparison(name: "overhead p99", unit: "ms", fleet: p99, peer: nil, lowerIsBetter: true,
                           target: countRequests ? "- (through the counting proxy)" : "≤ \(Int(overheadTarget)) ms",
                           met: countRequests ? nil : p99.map { $0 <= overheadTarget }),
                Comparison(name: "worker peak RSS", unit: "MB", fleet: rss, peer: nil, lowerIsBetter: true, target: "≤ 300 MB", met: rss.map { $0 <= 300 }),
                Comparison(name: "overhead p50, nominal", unit: "ms", fleet: report.median(metric("overhead_nominal_p50", store)), peer: nil,
                           lowerIsBetter: true, target: "-", met: nil),
                Comparison(name: "overhead p99, nominal", unit: "ms", fleet: report.median(metric("overhead_nominal_p99", store)), peer: nil,
                           lowerIsBetter: true, target: "-", met: nil),
            ], notes: [])
            print("")
        }
        if countRequests {
            printGrid(title: "requests per render at the gateway (every render drained; the worker's store checks left out)",
                      header: S3RequestKind.allCases.map(\.rawValue), rows: [S3RequestKind.allCases.map {
                report.median("render.requests.\($0.rawValue.lowercased())").map { String(format: "%.2f", $0) } ?? "-"
            }])
            print("")
        }
        [
            "overhead = request to complete, minus the provider's own time for that render (its submit's arrival at the fake",
            "to the start of its webhook): claim, submit, webhook delivery and verification, download, store, settle.",
            "nominal = minus the configured latency instead, which also charges the fleet with the fake's lateness in sending.",
            "the fake provider and the webhook receiver run in this process; the render worker is its own process.",
            "with --provider-limit below --in-flight, the overhead includes the wait for a slot; a user refused RENDER_BUSY",
            "asks again after retryAfterSeconds plus up to a second, as people would.",
        ].forEach { print($0) }
    }

    /// The dispatcher's own webhook routes (verify, store once, announce) on a loopback server.
    private func webhookReceiver(store: RenderStore, http: any HTTPClient, jwksURL: String) async throws -> FakeServer {
        var logger = Logger(label: "fleet-bench.webhooks")
        logger.logLevel = .warning
        let router = Router()
        WebhookRoutes(settings: WebhookSettings(falJWKSURL: jwksURL), http: http, store: store, logger: logger).register(on: router)
        return try await FakeServer.start(router: router)
    }

}

/// Keeps a fixed number of renders in flight, as that many users would who each request a
/// render, wait for it (on `fleet_renders_finished`, as `render.wait` does) and request the next.
actor ClosedLoop {
    let requests: RenderRequests
    let pool: PostgresPool
    let inFlight: Int
    let users: Int
    /// The benchmark's own LISTEN connection, standing in for the backends' `render.wait`s.
    private let notifier: Notifier
    private var listening: Task<Void, Never>?
    /// Requested and not yet seen to end.
    private var open: Set<String> = []
    /// Seen to end since the last `takeEnded`.
    private var ended: [String] = []
    private var next = 0
    private var failure: (any Error)?
    private var replacing: Task<Void, Never>?
    /// Whether a render that ends (or is refused) is requested again; off while draining.
    private var refilling = true
    /// Refused renders waiting to be asked again.
    private var refusedWaiting = 0
    /// Renders accepted since the last `takeAccepted`.
    private var accepted = 0

    init(requests: RenderRequests, pool: PostgresPool, conninfo: String, inFlight: Int, users: Int, logger: Logger) {
        self.requests = requests
        self.pool = pool
        self.inFlight = inFlight
        self.users = max(1, users)
        notifier = Notifier(conninfo: conninfo, logger: logger)
    }

    /// Listens, then requests `inFlight` renders evenly over `duration`: all at once, they would
    /// stay one wave every latency, the fixed latency keeping them in step. From then on each
    /// render that ends is replaced at once.
    func ramp(over duration: Duration) async throws {
        let events = notifier.subscribe(to: [RenderChannel.finished]).events
        listening = Task { [notifier] in await notifier.run() }
        replacing = Task { await replaceEnded(events) }
        try await fill(over: duration)
    }

    /// Requests `inFlight` renders evenly over `duration`, each replaced as it ends from then on.
    func fill(over duration: Duration) async throws {
        refilling = true
        let start = ContinuousClock.now
        for n in 0..<inFlight {
            try await Task.sleep(until: start + duration * (Double(n) / Double(inFlight)))
            try await request()
        }
    }

    /// Stops replacing the renders that end and returns once every render requested has been
    /// announced ended (a render that failed counts: `checkAllComplete` looks afterwards).
    func drain(timeout: Duration) async throws {
        refilling = false
        let deadline = ContinuousClock.now + timeout
        while !open.isEmpty || refusedWaiting > 0 {
            if let failure { throw failure }
            guard ContinuousClock.now < deadline else {
                throw BenchError("\(open.count) renders were not announced ended within \(timeout) of the drain's start")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        ended = []
    }

    /// Renders accepted since the last call (refusals not counted).
    func takeAccepted() -> Int {
        defer { accepted = 0 }
        return accepted
    }

    /// Every render requested completed (read once, after the measurements).
    func checkAllComplete() async throws {
        let notComplete = try await pool.query("SELECT count(*) AS n FROM renders WHERE status <> 'complete'").rows[0].int("n")
        guard notComplete == 0 else { throw BenchError("\(notComplete) renders did not complete") }
    }

    func stop() {
        replacing?.cancel()
        listening?.cancel()
    }

    private func replaceEnded(_ events: AsyncStream<NotifierEvent>) async {
        for await event in events {
            if Task.isCancelled { return }
            switch event {
            case .mightHaveMissed:
                break
            case .notification(_, let id):
                guard open.remove(id) != nil else { continue }
                ended.append(id)
                guard refilling else { continue }
                Task { do { try await self.request() } catch { self.failed(error) } }
            }
        }
    }

    private func failed(_ error: any Error) { failure = failure ?? error }

    /// A refused user asks again, unless the loop is draining.
    private func askAgain() async {
        refusedWaiting -= 1
        guard refilling else { return }
        do { try await request() } catch { failed(error) }
    }

    private func request() async throws {
        next += 1
        let n = next
        let id = "bench-\(n)"
        open.insert(id)
        let asked = ContinuousClock.now
        do {
            // The photos are all in one tree; the requester (whose credits pay) varies.
            _ = try await requests.request(RenderRequest(
                renderID: StorageID(id), requester: .user("bench-\(n % users + 1)"), ownerID: StorageID("bench"),
                garmentID: StorageID("g1"), bodyPhotoID: StorageID("b1"), category: .tops))
            accepted += 1
        } catch RenderRequestError.busy(let retryAfter) {
            // Refused at once: the user asks again when told to, as the app would, give or take
            // a second (people do not tap in step; refused users all coming back in the same
            // instant would measure a herd no real traffic makes).
            busy.append((ContinuousClock.now - asked).seconds * 1000)
            open.remove(id)
            refusedWaiting += 1
            Task {
                try? await Task.sleep(for: .seconds(Double(retryAfter) + Double.random(in: 0...1)))
                await self.askAgain()
            }
        }
    }

    /// How long each RENDER_BUSY took to come back, in ms, since the last `takeBusy`.
    private var busy: [Double] = []

    private func takeBusy() -> [Double] {
        defer { busy = [] }
        return busy
    }

    struct Ended {
        let id: String
        let providerJobID: String?
        let requestedAt: Date
        /// Request to end, from the row's own timestamps.
        let seconds: Double
        let complete: Bool
    }

    /// The renders seen to end since the last call.
    private func takeEnded() async throws -> [Ended] {
        if let failure { throw failure }
        let ids = ended
        ended = []
        guard !ids.isEmpty else { return [] }
        let rows = try await pool.query("""
            SELECT id, provider_job_id, extract(epoch FROM created_at) AS requested_at,
                   extract(epoch FROM updated_at - created_at) AS seconds, status::text AS status
            FROM renders WHERE id = ANY($1::text[])
            """, [PostgresArray(ids)]).rows
        return try rows.map {
            Ended(id: try $0.string("id"), providerJobID: $0["provider_job_id"], requestedAt: try $0.date("requested_at"),
                  seconds: try $0.double("seconds"), complete: try $0.string("status") == "complete")
        }
    }

    func run(for duration: Duration) async throws {
        _ = try await measure(for: duration, latency: 0, providerTime: { _ in nil })
    }

    /// The overheads, in ms, of the renders both requested and completed within one window
    /// (renders from before include the worker's start-up).
    struct Window {
        var rate = 0.0
        /// Request to complete minus the provider's own time for that render (`providerTime`).
        var overheads: [Double] = []
        /// Request to complete minus the nominal latency: also charges the fleet with the fake
        /// provider's own lateness in sending its webhook.
        var nominalOverheads: [Double] = []
        /// How long each RENDER_BUSY refusal took, in ms.
        var busy: [Double] = []
    }

    /// Completions per second over `duration`, and each render's overhead.
    func measure(for duration: Duration, latency: Double, providerTime: @Sendable (String) -> Duration?) async throws -> Window {
        _ = try await takeEnded()
        _ = takeBusy()
        let start = ContinuousClock.now
        let windowStart = Date()
        var window = Window()
        var completed = 0
        while ContinuousClock.now - start < duration {
            try await Task.sleep(for: .milliseconds(100))
            for render in try await takeEnded() {
                guard render.complete else { throw BenchError("render \(render.id) failed") }
                completed += 1
                guard render.requestedAt >= windowStart else { continue }
                let provider = render.providerJobID.flatMap(providerTime)?.seconds ?? latency
                window.overheads.append((render.seconds - provider) * 1000)
                window.nominalOverheads.append((render.seconds - latency) * 1000)
            }
        }
        window.rate = Double(completed) / (ContinuousClock.now - start).seconds
        window.busy = takeBusy()
        return window
    }

    /// Every completed render consumed exactly one credit.
    func checkCredits() async throws {
        let row = try await pool.query("""
            SELECT (SELECT sum(total_consumed) FROM credits) AS consumed,
                   (SELECT count(*) FROM renders WHERE status = 'complete') AS complete
            """).rows[0]
        guard try row.int("consumed") == row.int("complete") else {
            throw BenchError("credits consumed \(try row.int("consumed")) for \(try row.int("complete")) complete renders")
        }
    }
}
