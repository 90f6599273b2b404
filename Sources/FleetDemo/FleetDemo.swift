import ArgumentParser
import DispatcherProtocol
import FleetPostgres
import FleetRuntime
import FleetStorage
import FleetSupport
import Foundation
import Renders

/// The demo behind `scripts/run.sh`: a body photo and a garment photo go through the running
/// fleet — normalise, background removal, render — as the backend would send them, with
/// progress as it goes and a summary of the jobs at the end.
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

    struct Step {
        let name: String
        let id: String
        let state: String
        let seconds: Double
        let output: String
    }

    func run() async throws {
        let settings = try FleetProcess.bootstrap()
        let dispatcher = try DispatcherSettings.load(from: ProcessInfo.processInfo.environment)
        guard let address = dispatcher.clientAddress else { throw ValidationError("no dispatcher address: both listeners are off") }
        let client = try await DispatcherClient.connect(to: address, token: dispatcher.token)
        defer { Task { await client.close() } }
        let pool = settings.makePool(maxConnections: 1, applicationName: "fleet-demo")
        let storage = FileImageStorage(root: settings.storageRoot)
        let run = String(UUID().uuidString.prefix(8)).lowercased()
        let user = try StorageID("demo-\(run)")
        progress("demo user \(user), storage \(settings.storageRoot), dispatcher \(address)")

        // What the backend does on upload: store the file, ask the dispatcher to normalise it.
        try await storage.write(try Data(contentsOf: URL(fileURLWithPath: body)), to: .upload(user: user, upload: StorageID("body")))
        try await storage.write(try Data(contentsOf: URL(fileURLWithPath: garment)), to: .upload(user: user, upload: StorageID("garment")))
        let bodyJob = try await client.send(NormalizeImageRequest(userId: user.value, uploadId: "body", target: .body, imageId: "b1"))
        let garmentJob = try await client.send(ProcessGarmentRequest(userId: user.value, uploadId: "garment", garmentId: "g1"))
        var steps: [Step] = []
        steps.append(try await waitForJob("normalise body photo", bodyJob.jobId, client: client))
        let garmentStep = try await waitForJob("normalise garment photo", garmentJob.jobId, client: client)
        steps.append(garmentStep)
        guard let cutoutID = try await client.status(jobId: garmentJob.jobId).result?["cutoutJobId"]?.doubleValue else {
            throw ValidationError("the garment's normalisation did not chain a cut-out: \(garmentStep.state)")
        }
        steps.append(try await waitForJob("remove garment background", Int64(cutoutID), client: client))

        // The backend owns the credits table: a new account starts with a few.
        try await pool.query("""
            INSERT INTO credits (user_id, total_granted) VALUES ($1, 3)
            ON CONFLICT (user_id) DO UPDATE SET total_granted = credits.total_granted + 3
            """, [user.value])
        // What the backend does when the person taps "Try on".
        let render = try await client.send(RequestRenderRequest(
            renderId: "render-\(run)", userId: user.value, garmentId: "g1", bodyPhotoId: "b1", category: GarmentCategory.tops.rawValue))
        progress("render \(render.id) requested (provider \(render.provider), one credit reserved: \(render.charged))")
        steps.append(try await waitForRender(render.id, client: client))

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

    /// Waits a second at a time (the dispatcher wakes the wait the moment the job ends), so each
    /// change of state is shown as it happens.
    private func waitForJob(_ name: String, _ id: Int64, client: DispatcherClient) async throws -> Step {
        let started = ContinuousClock.now
        var last = ""
        while ContinuousClock.now - started < .seconds(timeout) {
            let job = try await client.wait(jobId: id, timeoutMs: 1000).job
            if job.state.rawValue != last {
                last = job.state.rawValue
                progress("\(name): job \(id) \(last)")
            }
            if job.isTerminal {
                let output = job.result.flatMap(Self.outputPath) ?? job.errors.last.map { "\($0.code ?? "error"): \($0.error)" } ?? ""
                return Step(name: name, id: "job \(id)", state: last, seconds: (ContinuousClock.now - started).seconds, output: output)
            }
        }
        return Step(name: name, id: "job \(id)", state: "timed out (\(last))", seconds: timeout, output: "is a worker running?")
    }

    private func waitForRender(_ id: String, client: DispatcherClient) async throws -> Step {
        let started = ContinuousClock.now
        var last = ""
        while ContinuousClock.now - started < .seconds(timeout) {
            let render = try await client.send(WaitRenderRequest(renderId: id, timeoutMs: 1000)).render
            if render.status.rawValue != last {
                last = render.status.rawValue
                progress("render: \(id) \(last)")
            }
            if render.isTerminal {
                return Step(name: "render (\(render.provider))", id: id, state: last, seconds: (ContinuousClock.now - started).seconds,
                            output: render.resultPath ?? render.errorCode ?? "")
            }
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

    private static func outputPath(_ result: JSONValue) -> String? {
        if case .string(let path)? = result["cutoutPath"], case .string(let backend)? = result["backend"] { return "\(path) (backend \(backend))" }
        if case .string(let path)? = result["path"] { return path }
        return nil
    }
}

func progress(_ message: String) {
    FileHandle.standardError.write(Data("· \(message)\n".utf8))
}
