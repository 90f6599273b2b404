import FakeProviders
@testable import FleetQueue
import FleetStorage
import FleetSupport
@testable import FleetTestSupport
import Foundation
@testable import Imaging
import Testing

/// The image worker as a process: jobs through the queue, and memory on hostile input.
@Suite(.serialized) struct ImageWorkerProcessTests {
    @Test func normaliseJobsRunThroughARealImageWorker() async throws {
        let q = try await TestQueue.make()
        let root = temporaryPath("images")
        try AtomicFile.write(try Data(contentsOf: corpus.appendingPathComponent("colorfulcups-1920x1200.heic")), to: "\(root)/u1/uploads/up1")
        try AtomicFile.write(Data("not an image".utf8), to: "\(root)/u1/uploads/up2")
        let worker = try WorkerProcess(databaseURL: q.url, executable: "image-worker", environment: ["FLEET_STORAGE_ROOT": root])
        let good = try await q.queue.enqueue(NewJob(kind: .imageNormalize, payload: #"{"userId":"u1","uploadId":"up1","target":"garment","imageId":"g1"}"#))
        let bad = try await q.queue.enqueue(NewJob(kind: .imageNormalize, payload: #"{"userId":"u1","uploadId":"up2","target":"body","imageId":"b1"}"#))
        try await q.waitUntil("both ended") { try await q.states().keys.allSatisfy(\.isTerminal) }
        worker.signal(SIGTERM)
        #expect(await worker.wait() == 0, "\(worker.log)")
        let done = try #require(try await q.queue.job(id: good.id))
        #expect(done.state == .completed && done.result?.contains("u1/garments/g1.jpg") == true)
        #expect(FileManager.default.fileExists(atPath: "\(root)/u1/garments/g1.jpg"))
        let refused = try #require(try await q.queue.job(id: bad.id))
        #expect(refused.state == .dead && refused.attempt == 1 && refused.errors.first?.code == "IMAGE_INVALID")
        // The code travels beside the message: the message does not repeat it.
        #expect(refused.errors.first.map { !$0.error.contains("IMAGE_INVALID") && !$0.error.isEmpty } == true, "\(refused.errors)")
    }

    @Test func aGarmentGoesThroughNormaliseThenCutoutInARealImageWorker() async throws {
        let q = try await TestQueue.make()
        let root = temporaryPath("images")
        let rembg = try await FakeRembg.start(script: FakeScript([.fail(status: 502)]))
        defer { Task { await rembg.stop() } }
        let upload = temporaryPath("upload") + ".png"
        try VipsImageRef.decode(plainBackgroundGarment).png().write(to: URL(fileURLWithPath: upload))
        try AtomicFile.write(try Data(contentsOf: URL(fileURLWithPath: upload)), to: "\(root)/u1/uploads/up1")
        let worker = try WorkerProcess(databaseURL: q.url, executable: "image-worker", environment: [
            "FLEET_STORAGE_ROOT": root, "FLEET_CUTOUT_BACKENDS": "rembg", "FLEET_REMBG_URL": rembg.baseURL,
            "FLEET_RETRY_BASE_MS": "50",
        ])
        let normalize = try await q.queue.enqueue(NewJob(
            kind: .imageNormalize, payload: #"{"userId":"u1","uploadId":"up1","target":"garment","imageId":"g1","thenCutout":true}"#))
        try await q.waitUntil("normalise and cut-out ended") {
            let states = try await q.states()
            return states.values.reduce(0, +) == 2 && states.keys.allSatisfy(\.isTerminal)
        }
        worker.signal(SIGTERM)
        #expect(await worker.wait() == 0, "\(worker.log)")
        let normalized = try #require(try await q.queue.job(id: normalize.id))
        #expect(normalized.state == .completed)
        // rembg's 502 made the first attempt fail; the retry succeeded on the same backend.
        let chained = try JSONDecoder().decode([String: JSONValue].self, from: Data(try #require(normalized.result).utf8))
        guard case .number(let cutoutID)? = chained["cutoutJobId"] else { Issue.record("no cutout job: \(chained)"); return }
        let cutout = try #require(try await q.queue.job(id: Int64(cutoutID)))
        #expect(cutout.kind == .garmentCutout && cutout.state == .completed && cutout.attempt == 2, "\(cutout)")
        #expect(cutout.errors.first?.code == "BACKGROUND_REMOVAL_UNAVAILABLE")
        let result = try JSONDecoder().decode(CutoutResult.self, from: Data(try #require(cutout.result).utf8))
        #expect(result.backend == "rembg" && result.cutoutPath == "u1/garments/g1_cutout.png")
        #expect(abs(result.foregroundFraction - garmentFraction) < 0.02)
        #expect(FileManager.default.fileExists(atPath: "\(root)/u1/garments/g1_cutout.png"))
        #expect(FileManager.default.fileExists(atPath: "\(root)/u1/garments/g1_preview.jpg"))
    }

    struct CutoutResult: Decodable {
        let backend: String
        let cutoutPath: String
        let foregroundFraction: Double
    }

    @Test func theOneShotCutoutWritesBothFilesOrPrintsTheCode() async throws {
        let input = temporaryPath("garment") + ".jpg"
        try plainBackgroundGarment.write(to: URL(fileURLWithPath: input))
        let outputDirectory = temporaryPath("cutout")
        let log = temporaryPath("cutout") + ".log"
        let process = try ChildProcess(builtExecutable("image-worker"), ["cutout", input, outputDirectory, "--backend", "local"],
                                       environment: ProcessInfo.processInfo.environment, outputPath: log)
        #expect(await process.wait(timeout: .seconds(60)) == 0)
        #expect(try String(contentsOfFile: log, encoding: .utf8).contains("backend local"))
        #expect(try pixel(Data(contentsOf: URL(fileURLWithPath: outputDirectory + "/cutout.png")), 3, 3)[3] == 0)
        #expect(FileManager.default.fileExists(atPath: outputDirectory + "/preview.jpg"))

        let text = temporaryPath("text") + ".jpg"
        try Data("not an image".utf8).write(to: URL(fileURLWithPath: text))
        let refused = try ChildProcess(builtExecutable("image-worker"), ["cutout", text, outputDirectory],
                                       environment: ProcessInfo.processInfo.environment, outputPath: log)
        #expect(await refused.wait(timeout: .seconds(60)) == 1)
        #expect(try String(contentsOfFile: log, encoding: .utf8).contains("IMAGE_INVALID"))
    }

    /// Every bad input ends with its code in bounded memory, the 30000 × 30000 PNG bomb (2.7 GB
    /// decoded) included. The peak is the one-shot process's own, measured by a small python
    /// parent: a child spawned straight from this (large) test process would report this
    /// process's resident size as its own peak (Linux keeps the shared address space's high
    /// water mark across vfork and exec).
    @Test func badInputsEndWithTheirCodeInBoundedMemory() async throws {
        let folder = temporaryPath("bad-inputs")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let measure = "import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
            + "print('peak_kb', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(code)"
        for (name, data, code) in try badImageInputs() {
            let input = "\(folder)/\(name)"
            try data.write(to: URL(fileURLWithPath: input))
            let log = temporaryPath("normalize") + ".log"
            let process = try ChildProcess("/usr/bin/python3", ["-c", measure, builtExecutable("image-worker"), "normalize", input, "\(folder)/out.jpg"],
                                           environment: ProcessInfo.processInfo.environment, outputPath: log)
            #expect(await process.wait(timeout: .seconds(30)) == 1, "\(name)")
            let output = try String(contentsOfFile: log, encoding: .utf8)
            #expect(output.contains(code), "\(name): \(output)")
            let peak = output.split(separator: "\n").first { $0.hasPrefix("peak_kb ") }.flatMap { Int($0.dropFirst(8)) } ?? .max
            #expect(peak < 150 * 1024, "\(name) peaked at \(peak) kB")
            #expect(!FileManager.default.fileExists(atPath: "\(folder)/out.jpg"))
        }
    }
}
