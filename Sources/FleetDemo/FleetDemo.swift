import ArgumentParser
import Foundation
import Shared

/// The demo behind `scripts/run.sh`: a body photo and a garment photo go through the running
/// fleet — normalise, background removal, render — as the backend would send them, with
/// progress as it goes and a summary of the jobs at the end.
@main
struct FleetDemo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fleet-demo",
        abstract: "Send a body photo and a garment photo through normalise → background removal → render on the running fleet.",
        discussion: """
            Needs the dispatcher, an image worker and a render worker running on DATABASE_URL with the same \
            FLEET_STORAGE_ROOT (scripts/run.sh starts them). The render uses the provider set in fleet_settings \
            (the offline `local` composite by default, which is not AI).
            """)

    @Option(help: "The body photo (default: ../shared/corpus/honeywave-1080x1920.jpg).")
    var body = "../shared/corpus/honeywave-1080x1920.jpg"
    @Option(help: "The garment photo, ideally on a plain background (default: scripts/demo/garment-on-plain-background.jpg).")
    var garment = "scripts/demo/garment-on-plain-background.jpg"
    @Option(help: "Seconds to wait for each step.") var timeout = 120.0

    struct Step {
        let name: String
        let id: String
        let state: String
        let seconds: Double
        let output: String
    }

    func run() async throws {
        let settings = try FleetProcess.bootstrap()
        let pool = PostgresPool(conninfo: settings.databaseURL, maxConnections: 2, applicationName: "fleet-demo")
        let queue = JobQueue(driver: PostgresQueueDriver(pool: pool))
        let storage = FileImageStorage(root: settings.storageRoot)
        let run = String(UUID().uuidString.prefix(8)).lowercased()
        let user = try StorageID("demo-\(run)")
        print("demo user \(user), storage \(settings.storageRoot)")

        // What the backend does on upload: store the file, enqueue its normalisation.
        try await storage.write(try Data(contentsOf: URL(fileURLWithPath: body)), to: .upload(user: user, upload: StorageID("body")))
        try await storage.write(try Data(contentsOf: URL(fileURLWithPath: garment)), to: .upload(user: user, upload: StorageID("garment")))
        let bodyJob = try await queue.enqueue(NewJob(kind: .imageNormalize, encoding: NormalizeImagePayload(
            userId: user, uploadId: StorageID("body"), target: .body, imageId: StorageID("b1"))))
        let garmentJob = try await queue.enqueue(NewJob(kind: .imageNormalize, encoding: NormalizeImagePayload(
            userId: user, uploadId: StorageID("garment"), target: .garment, imageId: StorageID("g1"), thenCutout: true)))
        var steps: [Step] = []
        steps.append(try await waitForJob("normalise body photo", bodyJob.id, queue: queue))
        let garmentStep = try await waitForJob("normalise garment photo", garmentJob.id, queue: queue)
        steps.append(garmentStep)
        guard let cutoutID = try await queue.job(id: garmentJob.id)?.result.flatMap(Self.cutoutJobID) else {
            throw ValidationError("the garment's normalisation did not chain a cut-out: \(garmentStep.state)")
        }
        steps.append(try await waitForJob("remove garment background", cutoutID, queue: queue))

        // What the backend does when the person taps "Try on": a render request.
        try await pool.query("""
            INSERT INTO credits (user_id, total_granted) VALUES ($1, 3)
            ON CONFLICT (user_id) DO UPDATE SET total_granted = credits.total_granted + 3
            """, [user.value])
        let render = try await RenderRequests(pool: pool).request(RenderRequest(
            renderId: StorageID("render-\(run)"), requester: .user(user.value), ownerId: user,
            garmentId: StorageID("g1"), bodyPhotoId: StorageID("b1"), category: .tops))
        progress("render \(render.id) requested (provider \(render.provider))")
        steps.append(try await waitForRender(render.id, store: RenderStore(pool: pool)))

        print("")
        printSummary(steps)
        print("")
        print("results under \(settings.storageRoot)/\(user)/:")
        for path in ["body/b1.jpg", "garments/g1.jpg", "garments/g1_cutout.png", "garments/g1_preview.jpg", "renders/\(render.id).jpg"] {
            let full = "\(settings.storageRoot)/\(user)/\(path)"
            let size = (try? FileManager.default.attributesOfItem(atPath: full)[.size] as? Int).flatMap { $0 }
            print("  \(full)\(size.map { "  (\($0) bytes)" } ?? "  (missing)")")
        }
        if steps.contains(where: { !["completed", "complete"].contains($0.state) }) { throw ExitCode.failure }
    }

    private func waitForJob(_ name: String, _ id: Int64, queue: JobQueue) async throws -> Step {
        let started = ContinuousClock.now
        var last = ""
        while ContinuousClock.now - started < .seconds(timeout) {
            guard let job = try await queue.job(id: id) else { throw ValidationError("job \(id) vanished") }
            if job.state.rawValue != last {
                last = job.state.rawValue
                progress("\(name): job \(id) \(last)")
            }
            if job.state.isTerminal {
                let output = job.result.flatMap(Self.outputPath) ?? job.errors.last.map { "\($0.code ?? "error"): \($0.error)" } ?? ""
                return Step(name: name, id: "job \(id)", state: last, seconds: (ContinuousClock.now - started).seconds, output: output)
            }
            try await Task.sleep(for: .milliseconds(200))
        }
        return Step(name: name, id: "job \(id)", state: "timed out (\(last))", seconds: timeout, output: "is a worker running?")
    }

    private func waitForRender(_ id: String, store: RenderStore) async throws -> Step {
        let started = ContinuousClock.now
        var last = ""
        while ContinuousClock.now - started < .seconds(timeout) {
            guard let render = try await store.render(id: id) else { throw ValidationError("render \(id) vanished") }
            if render.status.rawValue != last {
                last = render.status.rawValue
                progress("render: \(id) \(last)")
            }
            if render.status.isTerminal {
                return Step(name: "render (\(render.provider))", id: id, state: last, seconds: (ContinuousClock.now - started).seconds,
                            output: render.resultPath ?? render.errorCode ?? "")
            }
            try await Task.sleep(for: .milliseconds(200))
        }
        return Step(name: "render", id: id, state: "timed out (\(last))", seconds: timeout, output: "is a render worker running?")
    }

    private func printSummary(_ steps: [Step]) {
        let rows = [["step", "id", "state", "seconds", "output"]]
            + steps.map { [$0.name, $0.id, $0.state, String(format: "%.2f", $0.seconds), $0.output] }
        let widths = rows[0].indices.map { column in rows.map { $0[column].count }.max() ?? 0 }
        for (index, row) in rows.enumerated() {
            print(row.enumerated().map { $1.padding(toLength: widths[$0], withPad: " ", startingAt: 0) }.joined(separator: "  "))
            if index == 0 { print(widths.map { String(repeating: "-", count: $0) }.joined(separator: "  ")) }
        }
    }

    private static func result(_ json: String) -> [String: JSONValue] {
        (try? JSONDecoder().decode([String: JSONValue].self, from: Data(json.utf8))) ?? [:]
    }

    private static func cutoutJobID(_ json: String) -> Int64? {
        if case .number(let id)? = result(json)["cutoutJobId"] { return Int64(id) }
        return nil
    }

    private static func outputPath(_ json: String) -> String? {
        let fields = result(json)
        if case .string(let path)? = fields["cutoutPath"], case .string(let backend)? = fields["backend"] { return "\(path) (backend \(backend))" }
        if case .string(let path)? = fields["path"] { return path }
        return nil
    }
}

func progress(_ message: String) {
    FileHandle.standardError.write(Data("· \(message)\n".utf8))
}
