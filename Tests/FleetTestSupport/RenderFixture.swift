import FakeProviders
import FleetHTTPClient
@testable import FleetQueue
import FleetStorage
import FleetSupport
import Foundation
@testable import Imaging
@testable import Providers
@testable import Renders
import Testing

/// A database, a storage tree with one user's body photo and garment cut-out, and a render
/// handler wired to real providers (local, or fal's queue API on a fake server).
struct RenderFixture {
    let q: TestQueue
    let root: String
    let store: RenderStore
    let requests: RenderRequests
    let storage: FileImageStorage
    let handler: RenderHandler
    let fal: FakeFal?

    static let bodyPhoto: Data = try! ImageNormalizer().normalize(path: corpus.appendingPathComponent("honeywave-1080x1920.jpg").path).jpeg

    /// `falQueueURL` points fal's queue API at another server than `fal` (a dropping one, say);
    /// `environment` adds provider settings (Google's); `registered`: the providers there are;
    /// `executor`: how the fixture's queue reaches its database (through PgBouncer, say).
    static func make(
        provider: String = LocalTryOnProvider.name, deadline: Duration = .seconds(30), fal: FakeFal? = nil, falQueueURL: String? = nil,
        environment: [String: String] = [:], registered: [TryOnProviderRegistration] = TryOnProviders.registered,
        executor: DriverExecutor = .pool
    ) async throws -> RenderFixture {
        let q = try await TestQueue.make(executor: executor)
        let root = temporaryPath("images")
        let storage = FileImageStorage(root: root)
        for owner in ["u1", "u2", "onboarding"] {
            let id = try StorageID(owner)
            try await storage.write(bodyPhoto, to: .bodyPhoto(user: id, photo: StorageID("b1")))
            try await storage.write(try await LocalBackgroundRemover().cutout(of: plainBackgroundGarment), to: .garmentCutout(user: id, garment: StorageID("g1")))
        }
        try await RenderSettings(provider: provider, enabledCategories: Set(GarmentCategory.allCases)).save(to: q.pool)
        let http = CurlHTTPClient()
        let queueURL = falQueueURL ?? fal?.baseURL
        let falSettings = queueURL.map { ["FAL_KEY": fal?.key ?? "test-key", "FAL_QUEUE_URL": $0] } ?? [:]
        let settings = try ProviderSettings.load(from: falSettings.merging(environment) { $1 })
        // Runs for the rest of the test process, as a render worker's does for its own.
        let events = RenderEvents(notifier: TestNotifier(url: q.url).notifier)
        _ = Task { await events.run() }
        let handler = RenderHandler(
            store: RenderStore(pool: q.pool), storage: storage, providers: ProviderCatalog(settings: settings, http: http, registered: registered),
            fetcher: ProviderImageFetcher(http: http), events: events,
            options: RenderOptions(webhookURL: nil, webhookGrace: .zero, pollInterval: .milliseconds(100)))
        let categories: @Sendable (String) -> Set<GarmentCategory> = { name in registered.first { $0.name == name }?.categories ?? [] }
        return RenderFixture(q: q, root: root, store: RenderStore(pool: q.pool),
                             requests: RenderRequests(pool: q.pool, admission: .running(on: q.url), deadline: deadline, supportedCategories: categories),
                             storage: storage, handler: handler, fal: fal)
    }

    /// A fixture rendering at a fake fal whose jobs take `latency`, `user` granted `credits`,
    /// for render workers run as processes (`workerEnvironment`).
    static func atFal(latency: Duration, deadline: Duration = .seconds(30), user: String = "u1", credits: Int) async throws -> RenderFixture {
        let fal = try await FakeFal.start()
        fal.update { $0.latency = latency }
        let f = try await make(provider: FashnProvider.name, deadline: deadline, fal: fal)
        try await f.grant(user, credits: credits)
        return f
    }

    /// A render worker process's environment: this fixture's storage and fal, polling fal every 100 ms.
    var workerEnvironment: [String: String] {
        ["FLEET_STORAGE_ROOT": root, "FAL_KEY": fal?.key ?? "", "FAL_QUEUE_URL": fal?.baseURL ?? "",
         "FLEET_RENDER_WEBHOOK_GRACE_MS": "0", "FLEET_RENDER_POLL_MS": "100"]
    }

    func grant(_ user: String, credits: Int) async throws {
        try await q.pool.query("INSERT INTO credits (user_id, total_granted) VALUES ($1, $2)", [user, credits])
    }

    func subscribe(_ user: String, status: String, expiresIn seconds: Double) async throws {
        try await q.pool.query("""
            INSERT INTO subscriptions (user_id, status, started_at, expires_at)
            VALUES ($1, $2, now() - interval '10 days', now() + make_interval(secs => $3))
            """, [user, status, seconds])
    }

    func credits(_ user: String) async throws -> (granted: Int, consumed: Int, reserved: Int) {
        let row = try await q.pool.query("""
            SELECT coalesce((SELECT total_granted FROM credits WHERE user_id = $1), 0) AS granted,
                   coalesce((SELECT total_consumed FROM credits WHERE user_id = $1), 0) AS consumed,
                   (SELECT count(*) FROM credit_reservations WHERE user_id = $1) AS reserved
            """, [user]).rows[0]
        return (try row.int("granted"), try row.int("consumed"), try row.int("reserved"))
    }

    func ledger(_ render: String) async throws -> [String] {
        try await q.pool.query("SELECT entry FROM credit_ledger WHERE render_id = $1 ORDER BY id", [render]).rows.map { try $0.string("entry") }
    }

    func request(_ id: String, user: String = "u1", category: GarmentCategory = .tops) async throws -> RenderRecord {
        try await requests.request(RenderRequest(
            renderID: StorageID(id), requester: .user(user), ownerID: StorageID(user), garmentID: StorageID("g1"),
            bodyPhotoID: StorageID("b1"), category: category))
    }

    /// How a render's job ended, as the worker records it: completed with its result, or dead at
    /// once with its render's failure (`JobError.permanent`).
    enum JobEnd: Equatable {
        case completed(JSONValue?)
        case dead(code: String, message: String)

        var deadCode: String? { if case .dead(let code, _) = self { code } else { nil } }
    }

    /// Runs the render's job through the handler, as a worker that claimed it would; an
    /// infrastructure error (one the worker would retry) is thrown.
    @discardableResult
    func run(_ render: RenderRecord, with handler: RenderHandler? = nil) async throws -> JobEnd {
        let jobID = try #require(render.jobID)
        let job = try #require(try await q.queue.job(id: jobID))
        let claimed = ClaimedJob(id: job.id, kind: job.kind, queue: job.queue, priority: job.priority, attempt: 1,
                                 maxAttempts: job.maxAttempts, payload: job.payload, createdAt: Date())
        do {
            return .completed(try await (handler ?? self.handler).run(claimed, context: JobContext(logger: testLogger, workerID: "test", queue: q.queue)))
        } catch JobError.permanent(let code, let message) {
            return .dead(code: code.rawValue, message: message)
        }
    }

    func reload(_ render: RenderRecord) async throws -> RenderRecord { try #require(try await store.render(id: render.id)) }

    /// Runs `render`, which a provider fault must end `RENDER_FAILED` (`PROVIDER_DOWN`, its job
    /// dead with that code), `user`'s credit released, before the deadline: a render that waited
    /// for it would end `RENDER_TIMEOUT` instead, so the codes tell, whatever the machine's speed.
    func runExpectingAFastFailure(_ render: RenderRecord, user: String = "u1", sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let end = try await run(render)
        let failed = try await reload(render)
        #expect(failed.status == .failed && failed.errorCode == "RENDER_FAILED", sourceLocation: sourceLocation)
        #expect(failed.failureCode == "PROVIDER_DOWN" && end.deadCode == "PROVIDER_DOWN", "\(end)", sourceLocation: sourceLocation)
        let credits = try await credits(user)
        #expect(credits.consumed == 0 && credits.reserved == 0, sourceLocation: sourceLocation)
    }
}
