import CVipsShims
import FakeProviders
import FleetHTTPClient
import FleetSupport
@testable import FleetTestSupport
import Foundation
@testable import Imaging
import Metrics
import MetricsTestKit
import Testing

let garmentFraction = (200.0 * 500 + 2 * 80 * 120) / (600 * 800)

/// Band values of one pixel of an encoded image.
func pixel(_ encoded: Data, _ x: Int, _ y: Int, bands: Int = 4) throws -> [Double] {
    var values = [Double](repeating: 0, count: bands)
    let image = try VipsImageRef.decode(encoded)
    #expect(image.withPointer { fleet_vips_pixel($0, Int32(x), Int32(y), &values, Int32(bands)) } == 0)
    return values
}

/// The chain, each backend and the composer, against fake Replicate and rembg servers on loopback.
@Suite struct BackgroundRemovalTests {
    let http = CurlHTTPClient()

    func replicate(_ fake: FakeReplicate, timeout: Duration = .seconds(5)) -> ReplicateBackgroundRemover {
        ReplicateBackgroundRemover(baseURL: fake.baseURL, token: FakeReplicate.token, timeout: timeout,
                                   pollInterval: .milliseconds(50), http: http)
    }

    func rembg(_ fake: FakeRembg, timeout: Duration = .seconds(5)) -> RembgBackgroundRemover {
        RembgBackgroundRemover(baseURL: fake.baseURL, timeout: timeout, http: http)
    }

    func cutout(_ backends: [any BackgroundRemover]) async throws -> BackgroundRemovalChain.Result {
        try await BackgroundRemovalChain(backends: backends).cutout(of: plainBackgroundGarment, logger: testLogger)
    }

    /// Replicate then local: a prediction Replicate answers with garbage must move the chain on at
    /// once. Replicate's budget is an hour, so a chain that waited for it would not finish within
    /// the deadline, and its skip would name the budget, not the garbage.
    func expectGarbageSkipsReplicateFast(_ fake: FakeReplicate, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let chain: [any BackgroundRemover] = [replicate(fake, timeout: .seconds(3600)), LocalBackgroundRemover()]
        try await withDeadline(.seconds(120), "a chain past garbage") { [self] in
            let result = try await cutout(chain)
            #expect(result.backend == "local" && result.skipped[0].contains("unreadable prediction"), sourceLocation: sourceLocation)
        }
    }

    /// The garment kept opaque and red, the background clear, trimmed with a margin, a white preview.
    func expectGoodCutout(_ cutout: Cutout) throws {
        #expect(abs(cutout.foregroundFraction - garmentFraction) < 0.02, "fraction \(cutout.foregroundFraction)")
        let margin = 24  // 3 % of 800
        #expect(abs(cutout.width - (360 + 2 * margin)) <= 6 && abs(cutout.height - (500 + 2 * margin)) <= 6,
                "\(cutout.width)x\(cutout.height)")
        let centre = try pixel(cutout.png, cutout.width / 2, cutout.height / 2)
        #expect(centre[3] == 255 && centre[0] > 150 && centre[1] < 70, "centre \(centre)")
        let corner = try pixel(cutout.png, 3, cutout.height - 4)  // beside the body, under a sleeve
        #expect(corner[3] == 0, "background pixel \(corner)")
        let previewCorner = try pixel(cutout.preview, 3, cutout.height - 4, bands: 3)
        #expect(previewCorner.allSatisfy { $0 >= 245 }, "preview background \(previewCorner)")
        #expect(cutout.png.starts(with: [0x89, 0x50, 0x4E, 0x47]) && cutout.preview.starts(with: [0xFF, 0xD8]))
    }

    @Test func theLocalFallbackCutsAGarmentOffAPlainBackground() async throws {
        let result = try await cutout([LocalBackgroundRemover()])
        #expect(result.backend == "local" && result.skipped.isEmpty)
        try expectGoodCutout(result.cutout)
    }

    @Test func replicateAnswersInSyncModeWithTheModelAndToken() async throws {
        let fake = try await FakeReplicate.start()
        defer { Task { await fake.stop() } }
        let result = try await cutout([replicate(fake, timeout: .seconds(8)), LocalBackgroundRemover()])
        #expect(result.backend == "replicate")
        try expectGoodCutout(result.cutout)
        let create = try #require(fake.requests.first)
        #expect(create.path == "/v1/models/bria/remove-background/predictions")
        #expect(create.headers["authorization"] == "Bearer \(FakeReplicate.token)" && create.headers["prefer"] == "wait=8")
        #expect(fake.requests.count == 1)
    }

    @Test func replicateIsPolledWhenTheSyncWaitEndsAndItsOutputMayBeAList() async throws {
        let fake = try await FakeReplicate.start(script: FakeScript([.succeedAfterPolls(3), .succeedWithOutputArray]))
        defer { Task { await fake.stop() } }
        // The fake cuts out for real (libvips) before answering: a budget a loaded machine cannot run out of.
        let polled = try await cutout([replicate(fake, timeout: .seconds(30))])
        #expect(polled.backend == "replicate")
        #expect(fake.requests.filter { $0.path.hasPrefix("/v1/predictions/") }.count == 3)
        let listed = try await cutout([replicate(fake, timeout: .seconds(30))])
        try expectGoodCutout(listed.cutout)
    }

    @Test func aServerErrorMovesToTheNextBackend() async throws {
        let replicateFake = try await FakeReplicate.start(script: FakeScript([.fail(status: 503)]))
        let rembgFake = try await FakeRembg.start()
        defer { Task { await replicateFake.stop(); await rembgFake.stop() } }
        let result = try await cutout([replicate(replicateFake), rembg(rembgFake), LocalBackgroundRemover()])
        #expect(result.backend == "rembg")
        #expect(result.skipped.count == 1 && result.skipped[0].contains("503"))
        try expectGoodCutout(result.cutout)
        // rembg got the photo as the `file` part and the model as a form field.
        let sent = try #require(rembgFake.requests.first)
        #expect(sent.fields["model"] == "bria-rmbg" && sent.fields["file"] == "\(plainBackgroundGarment.count) bytes")
        #expect(sent.headers["content-type"]?.hasPrefix("multipart/form-data; boundary=") == true)
    }

    @Test func aRefusalStopsTheChain() async throws {
        let rembgFake = try await FakeRembg.start(script: FakeScript([.fail(status: 422)]))
        defer { Task { await rembgFake.stop() } }
        await #expect {
            _ = try await cutout([rembg(rembgFake), LocalBackgroundRemover()])
        } throws: { error in
            guard case BackgroundRemovalError.rejected(let backend, let status, let reason) = error else { return false }
            return backend == "rembg" && status == 422 && reason.contains("unknown model")
                && (error as? BackgroundRemovalError)?.code == .backgroundRemovalRejected
        }
    }

    @Test func aBackendThatDoesNotAnswerInTimeIsCancelledAndSkipped() async throws {
        let replicateFake = try await FakeReplicate.start(script: FakeScript([.hang]))
        let rembgFake = try await FakeRembg.start(script: FakeScript([.hang]))
        defer { Task { await replicateFake.stop(); await rembgFake.stop() } }
        let result = try await cutout([
            replicate(replicateFake, timeout: .seconds(3)), rembg(rembgFake, timeout: .seconds(1)), LocalBackgroundRemover(),
        ])
        #expect(result.backend == "local" && result.skipped.count == 2)
        // Out of time while waiting or while polling, depending on the machine's pace.
        #expect(result.skipped[0].hasPrefix("replicate:") && result.skipped[1].contains("timed out"))
        // The prediction left running is cancelled, so it is not billed.
        #expect(replicateFake.cancelledPredictions.count == 1)
    }

    @Test func anAnswerThatIsNotAPNGOrAFailedPredictionMovesOn() async throws {
        let replicateFake = try await FakeReplicate.start(script: FakeScript([.notPNG, .failPrediction]))
        let rembgFake = try await FakeRembg.start(script: FakeScript([.notPNG]))
        defer { Task { await replicateFake.stop(); await rembgFake.stop() } }
        let first = try await cutout([replicate(replicateFake), rembg(rembgFake), LocalBackgroundRemover()])
        #expect(first.backend == "local")
        #expect(first.skipped[0].contains("not a PNG") && first.skipped[1].contains("not a PNG (text/html"))
        let second = try await cutout([replicate(replicateFake), LocalBackgroundRemover()])
        #expect(second.backend == "local" && second.skipped[0].contains("failed: CUDA out of memory"))
    }

    /// A created prediction answered with something that is not Replicate's JSON (an HTML page,
    /// a truncated body, wrong types) is a provider fault: the chain moves on at once instead of
    /// waiting out Replicate's 30 s budget, and the prediction is not created again.
    @Test(arguments: Garbage.allCases)
    func aGarbledPredictionMovesOnAtOnce(_ garbage: Garbage) async throws {
        let replicateFake = try await FakeReplicate.start(script: FakeScript([.garbledPrediction(garbage)]))
        defer { Task { await replicateFake.stop() } }
        try await expectGarbageSkipsReplicateFast(replicateFake)
        #expect(replicateFake.requests.count == 1)
    }

    /// A poll answered with garbage: the chain moves on at once, and the prediction left running
    /// (billed) is cancelled.
    @Test(arguments: Garbage.allCases)
    func aGarbledPollMovesOnAtOnceAndCancelsThePrediction(_ garbage: Garbage) async throws {
        let replicateFake = try await FakeReplicate.start(script: FakeScript([.garbledPolls(garbage)]))
        defer { Task { await replicateFake.stop() } }
        try await expectGarbageSkipsReplicateFast(replicateFake)
        let paths = replicateFake.requests.map(\.path)
        #expect(paths.count == 2 && paths[1].hasPrefix("/v1/predictions/"), "\(paths)")
        #expect(replicateFake.cancelledPredictions.count == 1)
    }

    @Test func aPNGWithoutAlphaIsUnusable() async throws {
        let opaque = try pngOpaqueAnswer()
        struct OpaqueBackend: BackgroundRemover {
            let name = "opaque"
            let answer: Data
            func cutout(of photo: Data) async throws -> Data { answer }
        }
        let result = try await cutout([OpaqueBackend(answer: opaque), LocalBackgroundRemover()])
        #expect(result.backend == "local" && result.skipped[0].contains("no alpha channel"))
    }

    @Test func whenEveryBackendFailsTheJobWaitsForARetry() async throws {
        let replicateFake = try await FakeReplicate.start(script: FakeScript([.fail(status: 500)]))
        defer { Task { await replicateFake.stop() } }
        let closed = RembgBackgroundRemover(baseURL: "http://127.0.0.1:\(try freePort())", timeout: .seconds(2), http: http)
        await #expect {
            _ = try await cutout([replicate(replicateFake), closed])
        } throws: { error in
            guard case BackgroundRemovalError.unavailable(let reasons) = error else { return false }
            return reasons.count == 2 && reasons[1].contains("connection failed")
        }
    }

    @Test func eachBackendAttemptIsCountedAndTimedByOutcome() async throws {
        let metrics = TestMetricsOnce.shared
        let fake = try await FakeReplicate.start(script: FakeScript([.fail(status: 503)]))
        defer { Task { await fake.stop() } }
        func count(_ backend: String, _ outcome: String) -> Int64 {
            metrics.counters(label: "fleet_cutout_backend_total", dimensions: [("backend", backend), ("outcome", outcome)])
                .map(\.totalValue).reduce(0, +)
        }
        let before = (count("replicate", "transient"), count("local", "success"))
        _ = try await cutout([replicate(fake), LocalBackgroundRemover()])
        #expect(count("replicate", "transient") >= before.0 + 1 && count("local", "success") >= before.1 + 1)
        let timer = try metrics.expectTimer("fleet_cutout_backend_seconds", [("backend", "replicate")])
        #expect(!timer.values.isEmpty)
    }

    @Test func settingsChooseTheOrderAndRefuseUnconfiguredBackends() throws {
        let defaults = try BackgroundRemovalSettings.load(from: [:])
        #expect(defaults.order == [.local])
        let all = try BackgroundRemovalSettings.load(from: ["REPLICATE_API_TOKEN": "t", "FLEET_REMBG_URL": "http://127.0.0.1:7000"])
        #expect(all.order == [.replicate, .rembg, .local])
        let chosen = try BackgroundRemovalSettings.load(from: ["FLEET_REMBG_URL": "http://x", "FLEET_CUTOUT_BACKENDS": "local,rembg"])
        #expect(chosen.order == [.local, .rembg])
        #expect(throws: ConfigurationError.self) { try BackgroundRemovalSettings.load(from: ["FLEET_CUTOUT_BACKENDS": "replicate"]) }
        #expect(throws: ConfigurationError.self) { try BackgroundRemovalSettings.load(from: ["FLEET_CUTOUT_BACKENDS": "magic"]) }
        #expect(throws: ConfigurationError.self) { try BackgroundRemovalSettings.load(from: ["FLEET_CUTOUT_TIMEOUT_MS": "0"]) }
        // The token never shows in an error.
        let error = try #require(throws: ConfigurationError.self) {
            try BackgroundRemovalSettings.load(from: ["REPLICATE_API_TOKEN": "r8_secret", "FLEET_CUTOUT_BACKENDS": "replicate,rembg"])
        }
        #expect(!error.description.contains("r8_secret"))
    }

    /// An RGB PNG: a valid image but no cut-out.
    func pngOpaqueAnswer() throws -> Data {
        try VipsImageRef.decode(plainBackgroundGarment).png()
    }
}
