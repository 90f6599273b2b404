import ArgumentParser
import DispatcherProtocol
import FleetPostgres
import FleetRuntime
import FleetObjectStore
import FleetStorage
import FleetSupport
import Foundation
import Providers
import Renders

/// The demo behind `scripts/run.sh`: a body photo and a garment photo go through the running
/// fleet — normalise, background removal, render — in one `render.request` sent right after the
/// uploads, as a backend would, with progress as it goes and the jobs as the fleet ran them at the
/// end; then the garment again through `garment.process`, rendered by its id at once.
@main
struct FleetDemo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fleet-demo",
        abstract: "Send a body photo and a garment photo through normalise → background removal → render on the running fleet.",
        discussion: """
            Talks to the dispatcher's socket as the backend would (FLEET_DISPATCHER_SOCKET, else FLEET_DISPATCHER_TCP \
            with FLEET_DISPATCHER_TOKEN); needs an image worker and a render worker on the same database and \
            FLEET_STORAGE_ROOT (scripts/run.sh starts them all). The render uses the provider set in fleet_settings \
            (the offline `local` composite by default, which is not AI).
            """)

    @Option(help: "The body photo (default: Tests/Fixtures/corpus/honeywave-1080x1920.jpg).")
    var body = "Tests/Fixtures/corpus/honeywave-1080x1920.jpg"
    @Option(help: "The garment photo, ideally on a plain background (default: scripts/demo/garment-on-plain-background.jpg).")
    var garment = "scripts/demo/garment-on-plain-background.jpg"
    @Option(help: "Seconds to wait for each step.") var timeout = 120.0

    func run() async throws {
        let settings = try FleetProcess.bootstrap()
        let dispatcher = try DispatcherSettings.load(from: ProcessInfo.processInfo.environment)
        guard let address = dispatcher.clientAddress else { throw ValidationError("no dispatcher address: both listeners are off") }
        let client = try await DispatcherClient.connect(to: address, token: dispatcher.token)
        defer { Task { await client.close() } }
        let pool = settings.makePool(maxConnections: 1, applicationName: "fleet-demo")
        let storage = settings.storage.makeImageStorage()
        let run = String(UUID().uuidString.prefix(8)).lowercased()
        let user = try StorageID("demo-\(run)")
        progress("demo user \(user), storage \(settings.storage.summary), dispatcher \(address)")

        // The backend owns the credits table: a new account starts with a few.
        try await pool.query("""
            INSERT INTO credits (user_id, total_granted) VALUES ($1, 3)
            ON CONFLICT (user_id) DO UPDATE SET total_granted = credits.total_granted + 3
            """, [user.value])
        // What the backend does on upload: store the files. Then, at once, "Try on": one request
        // names the uploads, and the fleet normalises both photos, cuts the garment out and
        // renders, each step when the steps before it have completed.
        try await storage.write(try Data(contentsOf: URL(fileURLWithPath: body)), to: .upload(user: user, upload: StorageID("body")))
        try await storage.write(try Data(contentsOf: URL(fileURLWithPath: garment)), to: .upload(user: user, upload: StorageID("garment")))
        let render = try await client.send(RequestRenderRequest(
            renderId: "render-\(run)", userId: user.value, garmentId: "g1", bodyPhotoId: "b1", category: GarmentCategory.tops.rawValue,
            bodyUploadId: "body", garmentUploadId: "garment"))
        progress("render \(render.id) requested right after the uploads (provider \(render.provider), one credit reserved: \(render.charged))")
        let ended = try await waitForRender(render.id, client: client)
        let steps = try await report(ended, client: client)

        // The same try-on as a backend driving the steps itself sends it: `garment.process`, then
        // at once the render naming the garment by id. The render runs after the jobs still
        // making its photos, which the dispatcher finds: it is sent the cut-out, not the photo.
        try await storage.write(try Data(contentsOf: URL(fileURLWithPath: garment)), to: .upload(user: user, upload: StorageID("garment-2")))
        let processed = try await client.send(ProcessGarmentRequest(userId: user.value, uploadId: "garment-2", garmentId: "g2"))
        let byID = try await client.send(RequestRenderRequest(
            renderId: "render-\(run)-by-id", userId: user.value, garmentId: "g2", bodyPhotoId: "b1", category: GarmentCategory.tops.rawValue))
        progress("garment g2 sent to garment.process (normalise job \(processed.jobId), cut-out job \(processed.cutoutJobId)), "
            + "render \(byID.id) requested at once by the garment's id")
        let byIDEnded = try await waitForRender(byID.id, client: client)
        let byIDSteps = try await report(byIDEnded, client: client)

        print("")
        print("results in \(settings.storage.summary), under \(user)/:")
        let files: [StorageKey] = [.bodyPhoto(user: user, photo: try StorageID("b1"))]
            + (try ["g1", "g2"].flatMap { id -> [StorageKey] in
                let garment = try StorageID(id)
                return [.garment(user: user, garment: garment), .garmentCutout(user: user, garment: garment), .garmentPreview(user: user, garment: garment)]
            })
            + [.render(user: user, render: try StorageID(render.id)), .render(user: user, render: try StorageID(byID.id))]
        for key in files {
            let size = try? await storage.size(of: key)
            print("  \(key.relativePath)\(size.map { "  (\($0) bytes)" } ?? "  (missing)")")
        }
        for (ended, steps) in [(ended, steps), (byIDEnded, byIDSteps)] where ended.status != .complete || steps.contains(where: { $0.state != .completed }) {
            throw ExitCode.failure
        }
    }

    /// Prints the jobs as the fleet ran them for `render`, and how it ended; answers the jobs.
    private func report(_ render: RenderView, client: DispatcherClient) async throws -> [JobStatus] {
        print("")
        let steps = try await self.steps(of: render, client: client)
        printSummary(steps, since: render.createdAt)
        print("render \(render.id): \(render.status.rawValue)\(render.errorCode.map { " \($0)" } ?? ""), garment sent as its "
            + (render.garmentCutout == false ? "normalised photo (no cut-out)" : "cut-out"))
        return steps
    }

    /// Waits a second at a time (the dispatcher wakes the wait the moment the render ends), so
    /// each change of state is shown as it happens.
    private func waitForRender(_ id: String, client: DispatcherClient) async throws -> RenderView {
        let started = ContinuousClock.now
        var last = ""
        while true {
            let render = try await client.send(WaitRenderRequest(renderId: id, timeoutMs: 1000)).render
            if render.status.rawValue != last {
                last = render.status.rawValue
                progress("render: \(id) \(last)")
            }
            if render.isTerminal { return render }
            guard ContinuousClock.now - started < .seconds(timeout) else {
                throw ValidationError("render \(id) still \(last) after \(Int(timeout)) s: are an image worker and a render worker running?")
            }
        }
    }

    /// The jobs as the fleet ran them: the render's inputs (the jobs its job ran after), then its job.
    private func steps(of render: RenderView, client: DispatcherClient) async throws -> [JobStatus] {
        guard let jobID = render.jobId else { return [] }
        // The job's outcome is recorded just after the render's end: wait for it.
        _ = try await client.wait(jobId: jobID, timeoutMs: 5000)
        let renderJob = try await client.status(jobId: jobID)
        var steps: [JobStatus] = []
        for id in renderJob.after { steps.append(try await client.status(jobId: id)) }
        return steps + [renderJob]
    }

    private static func name(of job: JobStatus) -> String {
        switch (job.kind, job.payload["target"]) {
        case ("image.normalize", .string("body")?): "normalise body photo"
        case ("image.normalize", _): "normalise garment photo"
        case ("garment.cutout", _): "remove garment background"
        case ("render.run", _): "render"
        default: job.kind
        }
    }

    /// One line per job: when it was queued, started and ended, in seconds after the render was
    /// requested (the database's clock), and what it made.
    private func printSummary(_ steps: [JobStatus], since requested: Date) {
        func offset(_ date: Date?) -> String { date.map { String(format: "%+.2f", $0.timeIntervalSince(requested)) } ?? "-" }
        let rows = [["step", "job", "state", "attempts", "queued s", "started s", "ended s", "after", "output"]] + steps.map { job in
            [Self.name(of: job), "\(job.id)", job.state.rawValue, "\(job.attempt)", offset(job.createdAt), offset(job.startedAt),
             offset(job.finishedAt), job.after.map(String.init).joined(separator: ","),
             job.result.flatMap(Self.outputPath) ?? job.errors.last.map { "\($0.code ?? "error"): \($0.error)" } ?? ""]
        }
        let widths = rows[0].indices.map { column in rows.map { $0[column].count }.max() ?? 0 }
        for (index, row) in rows.enumerated() {
            print(row.enumerated().map { $1.padding(toLength: widths[$0], withPad: " ", startingAt: 0) }.joined(separator: "  "))
            if index == 0 { print(widths.map { String(repeating: "-", count: $0) }.joined(separator: "  ")) }
        }
    }

    private static func outputPath(_ result: JSONValue) -> String? {
        if case .string(let path)? = result["cutoutPath"], case .string(let backend)? = result["backend"] { return "\(path) (backend \(backend))" }
        if case .bool(false)? = result["cutout"] { return "no cut-out: every backend failed" }
        if case .string(let outcome)? = result["outcome"] { return outcome }
        if case .string(let path)? = result["path"] { return path }
        return nil
    }
}

func progress(_ message: String) {
    FileHandle.standardError.write(Data("· \(message)\n".utf8))
}
